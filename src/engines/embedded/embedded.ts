/**
 * The embedded engine: llama.cpp inside the node through node-llama-cpp (an
 * optional dependency, ~730 MB with its prebuilt binaries). It loads the GGUF
 * at `path` under the node's load lock, makes one context sequence per slot
 * (`parallel`) and serves them as an OpenAI-compatible server on loopback
 * (embedded-server.ts), so the proxy path is the same as for every engine.
 *
 * What it advertises: when the config leaves `workloads` out it fills the
 * list with what it does (chat, completion, embeddings); a listed workload
 * it cannot do (rerank, speech, transcription, audio input) is withdrawn
 * with a log line. It never adds a workload to a list the config gave.
 */
import http from 'node:http';
import fs from 'node:fs';
import type { AddressInfo } from 'node:net';
import type { Llama, LlamaContext, LlamaEmbeddingContext, LlamaModel } from 'node-llama-cpp';
import type { Descriptor } from '../../workloads/workloads.ts';
import { Backend, type BackendInfo, type Logger } from '../backend.ts';
import { engineLoadLock, type LoadLock } from '../load-lock.ts';
import { EmbeddedServer, SequencePool, type GenerationStats } from './embedded-server.ts';
import { tokenizeCount } from '../tokenize.ts';

/** Workloads the embedded engine serves. */
export const EMBEDDED_WORKLOADS: readonly string[] = ['chat', 'completion', 'embeddings'];

export const MISSING_PACKAGE_MESSAGE =
  'the embedded engine needs the optional package node-llama-cpp; reinstall with npm ci, or use engine: llamacpp';

export interface EmbeddedSettings {
  /** The GGUF file. */
  path: string;
  /** CPU threads per context (default 1: more oversubscribes a small machine). */
  threads: number;
  /** Offload to a GPU when node-llama-cpp finds one ('auto'); false keeps to the CPU. */
  gpu: boolean;
}

export interface EmbeddedOptions {
  /** Did the config list `workloads`? Then probing may only withdraw from the list, never fill it. */
  workloadsExplicit?: boolean;
  /** The lock that makes model loads take turns (default: the node's one lock). */
  loadLock?: LoadLock;
}

/** The workloads to advertise, and a line for each listed one that cannot be served. */
export function embeddedDescriptor(configured: Descriptor, explicit: boolean): { descriptor: Descriptor; withdrawn: string[] } {
  const withdrawn: string[] = [];
  let workloads: string[];
  if (!explicit) workloads = [...EMBEDDED_WORKLOADS];
  else {
    workloads = configured.workloads.filter((w) => EMBEDDED_WORKLOADS.includes(w));
    for (const w of configured.workloads) if (!EMBEDDED_WORKLOADS.includes(w)) withdrawn.push(`${w} withdrawn: the embedded engine does not serve it`);
  }
  if (configured.audio) withdrawn.push('audio input withdrawn: the embedded engine takes text only');
  return { descriptor: { workloads, audio: false }, withdrawn };
}

/** One Llama (the native binding) per process and GPU choice, shared by every embedded backend. */
const llamas = new Map<string, Promise<Llama>>();
/** llama.cpp's latest error lines, to say why a load failed (its exception only says "Failed to load model"). */
const llamaErrors: { at: number; line: string }[] = [];

/** The most telling llama.cpp error logged since `since`, if any. */
function llamaErrorSince(since: number): string | undefined {
  const lines = llamaErrors.filter((e) => e.at >= since).map((e) => e.line);
  return lines.find((l) => /error loading model:/.test(l))?.replace(/^.*error loading model:\s*/, '') ?? lines[0];
}
function sharedLlama(lib: typeof import('node-llama-cpp'), gpu: boolean, log: Logger): Promise<Llama> {
  const key = gpu ? 'auto' : 'cpu';
  let p = llamas.get(key);
  if (!p) {
    p = lib.getLlama({
      gpu: gpu ? 'auto' : false,
      build: 'never',
      progressLogs: false,
      logLevel: lib.LlamaLogLevel.error,
      logger: (level: unknown, message: string) => {
        const line = message.trim();
        if (!line) return;
        if (level === lib.LlamaLogLevel.error || level === lib.LlamaLogLevel.fatal) {
          llamaErrors.push({ at: Date.now(), line });
          if (llamaErrors.length > 20) llamaErrors.shift();
        }
        log(`llama.cpp ${level}: ${line}`);
      },
    });
    llamas.set(key, p);
    p.catch(() => llamas.delete(key));
  }
  return p;
}

export class EmbeddedBackend extends Backend {
  #server: http.Server | undefined;
  #httpServer: EmbeddedServer | undefined;
  #pool: SequencePool | undefined;
  #url: string | undefined;
  #model: LlamaModel | undefined;
  #context: LlamaContext | undefined;
  #embedding: Promise<LlamaEmbeddingContext> | undefined;
  #stopping = new AbortController();
  #loading: Promise<void> | undefined;
  readonly #explicit: boolean;
  readonly #loadLock: LoadLock;

  constructor(
    info: BackendInfo,
    descriptor: Descriptor,
    readonly cfg: EmbeddedSettings,
    log: Logger,
    opts: EmbeddedOptions = {},
  ) {
    super(info, descriptor, log);
    this.#explicit = opts.workloadsExplicit ?? false;
    this.#loadLock = opts.loadLock ?? engineLoadLock;
  }

  get url(): string | undefined {
    return this.#url;
  }

  /** The embedded server's /tokenize (llama-server's, with the model's own tokenizer). */
  override async countTokens(text: string, signal: AbortSignal): Promise<number | undefined> {
    const url = this.#url;
    return url ? tokenizeCount(url, this.authHeaders(), text, signal) : undefined;
  }

  /** Sequences free now (undefined until loaded, or when no generation is served). */
  get freeSequences(): number | undefined {
    return this.#pool?.free;
  }
  /** Generations by how they ended, since start. */
  get generations(): GenerationStats {
    return { ...(this.#httpServer?.stats ?? { completed: 0, aborted: 0, failed: 0 }) };
  }

  async start(): Promise<void> {
    this.#loading = this.#load();
    await this.#loading;
  }

  async #load(): Promise<void> {
    const signal = this.#stopping.signal;
    const { descriptor, withdrawn } = embeddedDescriptor(this.descriptor, this.#explicit);
    let lib: typeof import('node-llama-cpp');
    try {
      lib = await import('node-llama-cpp');
    } catch (err) {
      const missing = (err as { code?: string }).code === 'ERR_MODULE_NOT_FOUND' || /cannot find (package|module) 'node-llama-cpp'/i.test(String(err));
      const why = missing ? MISSING_PACKAGE_MESSAGE : `node-llama-cpp failed to load: ${brief(err)}`;
      return this.#fail(why);
    }
    if (!fs.existsSync(this.cfg.path)) return this.#fail(`the model file ${this.cfg.path} does not exist`);
    if (!isGguf(this.cfg.path)) return this.#fail(`the model file ${this.cfg.path} is not a GGUF file`);

    let release: (() => void) | undefined;
    let since = Date.now();
    try {
      release = await this.#loadLock.acquire(this.id, signal);
      since = Date.now();
      const llama = await sharedLlama(lib, this.cfg.gpu, this.log);
      const model = await llama.loadModel({ modelPath: this.cfg.path, gpuLayers: this.cfg.gpu ? 'auto' : 0, loadSignal: signal });
      this.#model = model;
      if (signal.aborted) return;
      const contextSize = Math.min(this.info.context, model.trainContextSize);
      if (contextSize < this.info.context)
        this.log(`backend ${this.id}: context ${this.info.context} capped to the model's training context ${contextSize}`, { backend: this.id });
      const generates = descriptor.workloads.includes('chat') || descriptor.workloads.includes('completion');
      let pool: SequencePool | undefined;
      if (generates) {
        this.#context = await model.createContext({ sequences: this.info.parallel, contextSize, threads: this.cfg.threads });
        pool = new SequencePool(Array.from({ length: this.info.parallel }, () => this.#context!.getSequence()));
      }
      const server = new EmbeddedServer({
        modelName: this.info.model,
        model,
        pool,
        contextSize,
        lib,
        chatWrapper: lib.resolveChatWrapper(model),
        workloads: () => this.descriptor.workloads,
        embeddingContext: () => (this.#embedding ??= model.createEmbeddingContext({ contextSize, threads: this.cfg.threads })),
      });
      if (signal.aborted) return;
      this.#httpServer = server;
      this.#pool = pool;
      this.#server = http.createServer(server.handler(signal));
      this.#server.keepAliveTimeout = 65_000;
      await new Promise<void>((resolve, reject) => {
        this.#server!.once('error', reject);
        this.#server!.listen(0, '127.0.0.1', () => resolve());
      });
      this.#url = `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
    } catch (err) {
      if (signal.aborted) return;
      await this.#dispose();
      // llama.cpp's log lines reach JS through the event loop, after the rejection: let them arrive.
      for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r));
      const detail = llamaErrorSince(since);
      return this.#fail(`loading ${this.cfg.path} failed: ${brief(err)}${detail ? ` (${brief(detail)})` : ''}`);
    } finally {
      release?.();
    }
    if (signal.aborted) return;
    for (const line of withdrawn) this.log(`backend ${this.id}: ${line}`, { backend: this.id });
    this.setDescriptor(descriptor);
    this.setState('healthy', `serving ${this.cfg.path} with node-llama-cpp`);
  }

  #fail(why: string): void {
    this.setState('dead', why, `backend ${this.id} dead: ${why}`);
  }

  async stop(): Promise<void> {
    this.#stopping.abort();
    await this.#loading?.catch(() => {});
    await this.#dispose();
    this.setState('stopped', 'stopped');
  }

  async #dispose(): Promise<void> {
    const server = this.#server;
    this.#server = undefined;
    this.#url = undefined;
    if (server) {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
    const embedding = this.#embedding;
    this.#embedding = undefined;
    await embedding?.then((c) => c.dispose()).catch(() => {});
    await this.#context?.dispose().catch(() => {});
    this.#context = undefined;
    this.#pool = undefined;
    await this.#model?.dispose().catch(() => {});
    this.#model = undefined;
  }
}

/** The first line of an error's message, at most 300 characters, for a reason line. */
function brief(err: unknown): string {
  const line = String((err as Error)?.message ?? err).split('\n')[0];
  return line.length > 300 ? `${line.slice(0, 300)}…` : line;
}

/** Does the file start with the GGUF magic? */
function isGguf(file: string): boolean {
  let fd: number | undefined;
  try {
    fd = fs.openSync(file, 'r');
    const head = Buffer.alloc(4);
    return fs.readSync(fd, head, 0, 4, 0) === 4 && head.toString('latin1') === 'GGUF';
  } catch {
    return false;
  } finally {
    if (fd !== undefined) fs.closeSync(fd);
  }
}
