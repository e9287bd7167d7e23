/**
 * The `openai` engine: an OpenAI-compatible server that someone else runs
 * (llama-server, vLLM, Ollama's /v1, LM Studio, a whisper or TTS server),
 * reached at `url` (SPEC section 3). The node never starts or stops it; it
 * only watches it:
 *
 * - Probed at start and every `healthIntervalMs` (5 s): `GET /health`. A
 *   server that answers 404 (or 405/501) there has no such endpoint; from
 *   then on it is probed with `GET /v1/models` (logged once).
 * - 2xx → healthy. 503 before it was ever healthy → still starting (a
 *   llama-server loading its model). Anything else → unhealthy, with the
 *   reason. The base class logs each change of state once.
 * - On every move into healthy it reads `GET /props` when the server has one
 *   (llama-server), for `buildInfo` and the `onProps` hook, before the
 *   state changes, so a version gate applies before any request arrives.
 */
import type { Descriptor } from '../workloads/workloads.ts';
import { Backend, type BackendInfo, type Logger } from './backend.ts';
import { describeOutcome, fetchProps, normalizeBaseUrl, probe, Ticker, type EngineProps } from './health.ts';

export interface OpenAIBackendConfig {
  /** Base URL of the server; a trailing slash or `/v1` is dropped. */
  url: string;
}

export interface OpenAIBackendOptions {
  /** Time between health probes (default 5000 ms). */
  healthIntervalMs?: number;
  /** Deadline of one probe (default 5000 ms). */
  probeTimeoutMs?: number;
  /**
   * Called with /props when the engine has them, before the backend turns
   * healthy. Return a descriptor to replace the backend's (a version gate
   * withdrawing a workload), or nothing to keep it.
   */
  onProps?: (props: EngineProps, backend: OpenAIBackend) => Descriptor | undefined | void;
}

/** Statuses that mean "this server has no GET /health". */
const NO_SUCH_ENDPOINT = new Set([404, 405, 501]);

export class OpenAIBackend extends Backend {
  readonly #base: string;
  readonly #opts: Required<Omit<OpenAIBackendOptions, 'onProps'>> & Pick<OpenAIBackendOptions, 'onProps'>;
  readonly #ticker: Ticker;
  #healthPath: '/health' | '/v1/models' = '/health';
  #everHealthy = false;
  #stopped = false;
  #checking: Promise<void> | undefined;
  #abort = new AbortController();

  constructor(info: BackendInfo, descriptor: Descriptor, cfg: OpenAIBackendConfig, log: Logger, opts: OpenAIBackendOptions = {}) {
    super(info, descriptor, log);
    this.#base = normalizeBaseUrl(cfg.url);
    this.#opts = { healthIntervalMs: opts.healthIntervalMs ?? 5000, probeTimeoutMs: opts.probeTimeoutMs ?? 5000, onProps: opts.onProps };
    this.#ticker = new Ticker(() => this.check(), this.#opts.healthIntervalMs);
  }

  get url(): string {
    return this.#base;
  }
  /** The path probed now: /health, or /v1/models once /health turned out not to exist. */
  get healthPath(): '/health' | '/v1/models' {
    return this.#healthPath;
  }

  /** Probe once now, then every interval. Resolves after the first probe, whatever it found. Never throws. */
  async start(): Promise<void> {
    if (this.#stopped) return;
    try {
      await this.check();
    } catch (err) {
      this.setState('unhealthy', `probe failed: ${String(err)}`);
    }
    this.markChecked();
    if (!this.#stopped && !this.#ticker.running) this.#ticker.start();
  }

  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    this.#ticker.stop();
    this.#abort.abort();
    await this.#checking?.catch(() => {});
    this.setState('stopped', 'stopped');
  }

  /** Run one health check now (the ticker calls this; tests and SIGHUP may too). Concurrent calls share one probe. */
  protected override async recheck(): Promise<void> {
    await this.check();
  }

  check(): Promise<void> {
    if (!this.#checking) {
      this.#checking = this.#check().finally(() => {
        this.#checking = undefined;
      });
    }
    return this.#checking;
  }

  async #check(): Promise<void> {
    if (this.#stopped) return;
    const signal = this.#abort.signal;
    let path = this.#healthPath;
    let o = await probe(this.#base, path, { timeoutMs: this.#opts.probeTimeoutMs, signal, headers: this.authHeaders() });
    if (this.#stopped) return;
    if (o.kind === 'status' && path === '/health' && NO_SUCH_ENDPOINT.has(o.status)) {
      this.#healthPath = path = '/v1/models';
      this.log(`backend ${this.id}: ${this.#base} has no GET /health (${o.status}); probing GET /v1/models from now on`, { backend: this.id });
      o = await probe(this.#base, path, { timeoutMs: this.#opts.probeTimeoutMs, signal, headers: this.authHeaders() });
      if (this.#stopped) return;
    }
    if (o.kind === 'ok') {
      if (this.state !== 'healthy') {
        await this.#readProps(signal);
        if (this.#stopped) return;
      }
      this.#everHealthy = true;
      this.setState('healthy', `answering GET ${path}`);
      return;
    }
    const why = `${this.#base}: ${describeOutcome(path, o)}`;
    if (o.kind === 'status' && o.status === 503 && !this.#everHealthy) this.setState('starting', `engine loading (${why})`);
    else this.setState('unhealthy', why);
  }

  async #readProps(signal: AbortSignal): Promise<void> {
    const props = await fetchProps(this.#base, { timeoutMs: this.#opts.probeTimeoutMs, signal, headers: this.authHeaders() });
    if (!props) return;
    this.engineProps = props;
    const d = this.#opts.onProps?.(props, this);
    if (d) this.setDescriptor(d);
  }
}
