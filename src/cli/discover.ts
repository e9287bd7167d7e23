/**
 * What `viiwork init` finds on this machine (issue 19, item 8): llama-server
 * on PATH and its build; GGUF files in the usual places as `on_demand`
 * entries with `memory: auto` (name, context and workloads from the file's
 * metadata); engines already listening on loopback at the usual ports as
 * `openai` entries: one `models: auto` entry for an endpoint that serves many
 * models (llama-server in router mode, Ollama, LM Studio, any listing more
 * than one), else one entry per model; the memory budget. Nothing is
 * started and no address beyond loopback is probed. Each finding says why.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { gguf } from '@huggingface/gguf';
import { request } from 'undici';
import { findExecutable } from '../config/executable.ts';
import { parseListing } from '../engines/many/listing.ts';
import { MemoryBudget } from '../lifecycle/budget.ts';
import { describeVersion, parseVersionOutput } from '../engines/llamacpp/version.ts';

/** Engines that usually listen on these loopback ports. */
export const KNOWN_PORTS: readonly { port: number; engine: string }[] = [
  { port: 8080, engine: 'llama-server' },
  { port: 11434, engine: 'Ollama' },
  { port: 1234, engine: 'LM Studio' },
  { port: 8000, engine: 'vLLM' },
];

/** Where GGUF files usually are: the folder given, ~/models, /models, the Hugging Face, LM Studio and llama.cpp caches. */
export function modelDirs(given: string | undefined, home = os.homedir()): string[] {
  return [
    ...(given ? [given] : []),
    path.join(home, 'models'),
    '/models',
    path.join(home, '.cache', 'huggingface', 'hub'),
    path.join(home, '.lmstudio', 'models'),
    path.join(home, '.cache', 'lm-studio', 'models'),
    path.join(home, '.cache', 'llama.cpp'),
  ];
}

/** GGUF files under `dir` (at most 4 levels deep, symlinks followed once, at most 200). */
export function findGgufs(dir: string, depth = 4, out: string[] = []): string[] {
  let entries: fs.Dirent[];
  try {
    entries = fs.readdirSync(dir, { withFileTypes: true });
  } catch {
    return out;
  }
  for (const e of entries.sort((a, b) => a.name.localeCompare(b.name))) {
    if (out.length >= 200) break;
    const p = path.join(dir, e.name);
    let isDir = e.isDirectory();
    let isFile = e.isFile();
    if (e.isSymbolicLink()) {
      try {
        const st = fs.statSync(p);
        isDir = st.isDirectory();
        isFile = st.isFile();
      } catch {
        continue;
      }
    }
    if (isFile && /\.gguf$/i.test(e.name) && !/mmproj/i.test(e.name)) out.push(p);
    else if (isDir && depth > 0 && !e.name.startsWith('.')) findGgufs(p, depth - 1, out);
  }
  return out;
}

export interface GgufFound {
  path: string;
  name: string;
  context: number;
  workloads: string[];
  why: string;
}

/** A model name clients may send: the file's general.name, else its file name, reduced to safe characters. */
export function modelName(meta: Record<string, unknown>, file: string): string {
  const raw = typeof meta['general.name'] === 'string' && meta['general.name'] ? String(meta['general.name']) : path.basename(file, path.extname(file));
  return raw.toLowerCase().replace(/[^a-z0-9._-]+/g, '-').replace(/^-+|-+$/g, '').slice(0, 64) || 'model';
}

/** One GGUF's entry from its metadata: embedding models (a pooling type, or an encoder) do embeddings, others chat. */
export function describeGguf(meta: Record<string, unknown>, file: string): GgufFound {
  const arch = String(meta['general.architecture'] ?? '');
  const trained = Number(meta[`${arch}.context_length`] ?? 0);
  const context = Math.max(512, Math.min(trained > 0 ? trained : 4096, 8192));
  const pooling = meta[`${arch}.pooling_type`];
  const embeds = pooling !== undefined || /bert|nomic-bert|jina-bert/.test(arch);
  const rerank = embeds && Number(pooling) === 4;
  const workloads = rerank ? ['rerank'] : embeds ? ['embeddings'] : ['chat', 'completion'];
  const why = `${arch || 'unknown architecture'}, trained context ${trained || 'unknown'} (context ${context}), ${rerank ? 'a reranker' : embeds ? 'an embedding model (pooling type set)' : 'a generation model'}`;
  return { path: file, name: modelName(meta, file), context, workloads, why };
}

export interface ListeningEngine {
  port: number;
  engine: string;
  url: string;
  models: string[];
  /** llama-server in router mode (its models carry a status, or /props says role "router"). */
  router: boolean;
}

/** GET a small JSON document from loopback within a second; undefined when there is none. */
async function getJson(url: string): Promise<unknown> {
  try {
    const r = await request(url, { headersTimeout: 500, bodyTimeout: 500, signal: AbortSignal.timeout(1000) });
    const text = await r.body.text();
    return r.statusCode === 200 ? JSON.parse(text) : undefined;
  } catch {
    return undefined; // nothing listens there, or not an OpenAI-compatible server
  }
}

/** GET /v1/models on 127.0.0.1 at each known port, 500 ms each; a router is told by its statuses, else by its /props. */
export async function probeLoopback(ports = KNOWN_PORTS, host = '127.0.0.1'): Promise<ListeningEngine[]> {
  const out: ListeningEngine[] = [];
  await Promise.all(
    ports.map(async ({ port, engine }) => {
      const url = `http://${host}:${port}`;
      const listing = parseListing(await getJson(`${url}/v1/models`), 65_536);
      if (!listing) return;
      const router = listing.router || ((await getJson(`${url}/props`)) as { role?: unknown } | undefined)?.role === 'router';
      if (listing.ids.length || router) out.push({ port, engine, url, models: listing.ids, router, ...(router ? { engine: 'llama-server (router mode)' } : {}) });
    }),
  );
  return out.sort((a, b) => a.port - b.port);
}

/**
 * An endpoint that serves many models (SPEC section 3): llama-server in
 * router mode, Ollama, LM Studio, or any that lists more than one (such as
 * llama-swap). Its entry is `models: auto`, so a model added there later is
 * served without editing the file.
 */
export function servesMany(e: ListeningEngine): boolean {
  return e.router || e.models.length > 1 || /ollama|lm studio/i.test(e.engine);
}

/** The entries for the engines found: one `models: auto` entry per many-model endpoint, else one per model (names not taken by a GGUF). */
export function engineEntries(engines: readonly ListeningEngine[], taken: ReadonlySet<string>): Record<string, unknown>[] {
  return engines.flatMap((e): Record<string, unknown>[] =>
    servesMany(e)
      ? [{ name: e.engine.toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-|-$/g, ''), engine: 'openai', url: e.url, models: 'auto' }]
      : e.models.filter((m) => !taken.has(m)).map((m) => ({ name: m, engine: 'openai', url: e.url, parallel: 4 })),
  );
}

/** What init says of an engine it found. */
function engineNote(e: ListeningEngine): string {
  const listed = e.models.length ? e.models.join(', ') : 'no models yet';
  if (e.router) return `${e.engine} answers on ${e.url}: ${listed} (engine: openai, models: auto: every model it lists; the node loads and unloads them on demand)`;
  if (servesMany(e)) return `${e.engine} answers on ${e.url}: ${listed} (engine: openai, models: auto: every model it lists, as it lists them)`;
  return `${e.engine} answers on ${e.url}: ${listed} (engine: openai, load: always)`;
}

/**
 * llama-server on PATH and its version, in either format `--version` prints
 * ("version: 4748 (c392e50)", "version: 0.5.0-dev (build 1, commit de3ff81)").
 */
export async function findLlamaServer(pathVar = process.env.PATH ?? ''): Promise<{ path: string; version?: string } | undefined> {
  const found = findExecutable('llama-server', pathVar, process.cwd());
  if (!found.ok) return undefined;
  const text = await new Promise<string>((resolve) =>
    execFile(found.path, ['--version'], { timeout: 5000 }, (_err, stdout, stderr) => resolve(`${stdout}\n${stderr}`)),
  );
  const v = parseVersionOutput(text);
  return { path: found.path, version: v ? describeVersion(v) : undefined };
}

export interface Discovery {
  llamaServer?: { path: string; version?: string };
  ggufs: GgufFound[];
  engines: ListeningEngine[];
  budget: { bytes: number; source: string };
  /** One line per finding and choice, for the operator. */
  notes: string[];
  models: Record<string, unknown>[];
}

/** Look at this machine: nothing is started, nothing beyond loopback is probed. */
export async function discover(opts: { modelsDir?: string; pathVar?: string; ports?: typeof KNOWN_PORTS } = {}): Promise<Discovery> {
  const notes: string[] = [];
  const llamaServer = await findLlamaServer(opts.pathVar);
  notes.push(llamaServer ? `llama-server: ${llamaServer.path}${llamaServer.version ? ` (${llamaServer.version})` : ''}` : 'llama-server: not on PATH; GGUF files become embedded entries (node-llama-cpp)');
  const files = [...new Set(modelDirs(opts.modelsDir).flatMap((d) => findGgufs(d)))];
  const ggufs: GgufFound[] = [];
  const names = new Set<string>();
  for (const file of files) {
    try {
      const { metadata } = await gguf(file, { allowLocalFile: true });
      const g = describeGguf(metadata as unknown as Record<string, unknown>, file);
      let name = g.name;
      for (let i = 2; names.has(name); i++) name = `${g.name}-${i}`;
      names.add(name);
      ggufs.push({ ...g, name });
      notes.push(`model ${name}: ${file}: ${g.why}; load: on_demand, memory: auto`);
    } catch (err) {
      notes.push(`skipped ${file}: not a readable GGUF (${(err as Error).message.slice(0, 80)})`);
    }
  }
  const engines = await probeLoopback(opts.ports);
  for (const e of engines) notes.push(engineNote(e));
  const budget = new MemoryBudget('auto');
  await budget.refresh();
  notes.push(`memory budget: ${(budget.bytes / 1024 ** 3).toFixed(1)} GiB (${budget.source}); kept as memory_budget: auto`);
  const models: Record<string, unknown>[] = [
    ...ggufs.map((g) =>
      llamaServer
        ? { name: g.name, engine: 'llamacpp', path: g.path, context: g.context, parallel: 2, workloads: g.workloads, load: 'on_demand', memory: 'auto', llamacpp: { binary: llamaServer.path, args: g.workloads.includes('embeddings') ? ['--embeddings'] : g.workloads.includes('rerank') ? ['--reranking'] : [] } }
        : { name: g.name, engine: 'embedded', path: g.path, context: g.context, parallel: 2, workloads: g.workloads, load: 'on_demand', memory: 'auto' },
    ),
    ...engineEntries(engines, names),
  ];
  return { llamaServer, ggufs, engines, budget: { bytes: budget.bytes, source: budget.source }, notes, models };
}
