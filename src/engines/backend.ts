/**
 * One engine endpoint serving one model with `parallel` slots. Every engine
 * (openai, llamacpp, embedded, sim) ends up as an HTTP server on loopback
 * that speaks the OpenAI API, so the proxy path is the same for all of them;
 * a Backend's job is to bring that server up, watch its health and take it
 * down.
 */
import { EventEmitter } from 'node:events';
import type { Descriptor } from '../workloads/workloads.ts';
import type { EngineProps } from './health.ts';
import type { PoolSettings } from './cache-model.ts';

/**
 * starting: loading, not yet serving (not a failure until its startup timeout).
 * healthy: serving. unhealthy: failing health checks, may recover or be restarted.
 * dead: gave up (restart budget spent); stopped: shut down on purpose.
 */
export type BackendState = 'starting' | 'healthy' | 'unhealthy' | 'dead' | 'stopped';

export interface BackendInfo {
  /** `${model}/${index}`, also the log prefix. */
  readonly id: string;
  readonly model: string;
  /** Index among this node's backends of the model (0-based, over all entries of that name). */
  readonly index: number;
  readonly parallel: number;
  readonly context: number;
  readonly engine: 'openai' | 'llamacpp' | 'embedded' | 'sim';
}

export type Logger = (msg: string, fields?: Record<string, unknown>) => void;

export abstract class Backend extends EventEmitter {
  #state: BackendState = 'starting';
  #descriptor: Descriptor;
  /** Why the backend is in its state, for /health and the dashboards. */
  reason = 'starting';
  /** What the engine said of itself in /props (llama-server), read on each move into healthy. */
  protected engineProps: EngineProps | undefined;
  /** The key this engine wants (models[].api_key_env), sent to it alone; never logged or reported. */
  #apiKey: string | undefined;

  constructor(
    readonly info: BackendInfo,
    descriptor: Descriptor,
    protected readonly log: Logger,
  ) {
    super();
    this.#descriptor = descriptor;
  }

  get id(): string {
    return this.info.id;
  }

  /** Give the backend its engine's key (from the environment variable the config names). */
  useApiKey(key: string | undefined): void {
    this.#apiKey = key || undefined;
  }

  /** Headers every request to this engine carries: its bearer key, when it has one. */
  authHeaders(): Record<string, string> {
    return this.#apiKey ? { authorization: `Bearer ${this.#apiKey}` } : {};
  }

  /** The engine's key, for an engine this node starts itself (llama-server --api-key). */
  protected get apiKey(): string | undefined {
    return this.#apiKey;
  }
  get state(): BackendState {
    return this.#state;
  }
  get descriptor(): Descriptor {
    return this.#descriptor;
  }

  /**
   * The engine's host-RAM prompt cache as the cache model needs it (cache-model.ts PoolSettings); undefined: none.
   * Set by engines that have one (today's llama-server with `--cache-ram`, the sim with `sim.cache_ram`).
   */
  promptPool: PoolSettings | undefined;

  /** /props of the engine, when it has them. */
  get props(): EngineProps | undefined {
    return this.engineProps;
  }
  /** llama-server's `build_info` (e.g. "b4500-abcdef"); undefined for engines without /props. */
  get buildInfo(): string | undefined {
    return this.engineProps?.buildInfo;
  }
  /** The build number in buildInfo (4500), for version gates. */
  get buildNumber(): number | undefined {
    return this.engineProps?.buildNumber;
  }

  /**
   * Slots this backend serves. `info.parallel` unless the engine says
   * otherwise once loaded (a router's model runs the slots its own preset
   * gives it, read from the router): capacity counts this.
   */
  get parallel(): number {
    return this.info.parallel;
  }

  /** Tokens per slot: `info.context` unless the engine says otherwise once loaded (as `parallel`). */
  get context(): number {
    return this.info.context;
  }

  /**
   * For an engine whose process the node does not own (a router's model):
   * ask it to unload, then stop watching. The lifecycle's unloads (idle,
   * room, operator) call this when it exists; a node that stops or reloads
   * calls `stop`, which leaves the engine's models as they are.
   */
  unloadEngine?(): Promise<void>;

  /** Base URL of the OpenAI-compatible server, e.g. http://127.0.0.1:39021 (no trailing slash). */
  abstract get url(): string | undefined;

  /** Bring the engine up; resolves once it is healthy or has failed for good. Never throws. */
  abstract start(): Promise<void>;
  /** Take it down; resolves when nothing of it is left running. */
  abstract stop(): Promise<void>;

  /**
   * The number of tokens of `text` by the engine's own tokenizer
   * (count_tokens, engines/tokenize.ts); undefined when it gives none.
   * Absent on engines without a tokenizer (openai, sim), so count_tokens
   * knows to ask elsewhere or estimate.
   */
  countTokens?(text: string, signal: AbortSignal): Promise<number | undefined>;

  /**
   * A request could not reach the engine (refused or reset connection).
   * The backend stops taking new leases at once and checks itself now, so
   * requests waiting in the queue are not sent to a dead process.
   */
  reportFailure(detail: string): void {
    if (this.#state !== 'healthy') return;
    this.setState('unhealthy', `a request could not reach the engine: ${detail}`);
    void this.recheck();
  }

  /** Probe the engine now (engines with health checks override this). */
  protected async recheck(): Promise<void> {}

  /** Narrow what this backend advertises (probing may withdraw a listed workload, never add an unlisted one). */
  protected setDescriptor(d: Descriptor): void {
    this.#descriptor = d;
    this.emit('descriptor', d);
  }

  #checked = false;

  /** The engine has been looked at once (a first health check, or any state decision): a node may call itself started. */
  get checked(): boolean {
    return this.#checked;
  }

  /** Called by an engine after its first health check, even when that check only says "still loading". */
  protected markChecked(): void {
    if (this.#checked) return;
    this.#checked = true;
    this.emit('checked');
  }

  /**
   * Move to `next` for `reason`; logs one line when the state changes (`line`
   * replaces the default wording, for a change that must read plainly, such
   * as a dead backend) and emits 'state' (next, prev) on any change.
   */
  protected setState(next: BackendState, reason: string, line?: string): void {
    if (next !== 'starting') this.markChecked();
    if (next === this.#state && reason === this.reason) return;
    const prev = this.#state;
    this.#state = next;
    this.reason = reason;
    if (prev !== next) this.log(line ?? `backend ${this.id} ${prev} → ${next}: ${reason}`, { backend: this.id, state: next });
    this.emit('state', next, prev);
  }
}

/**
 * The stand-in of an on-demand backend that is not loaded (SPEC section 11):
 * it keeps the entry's target listed (0 slots, state `unloaded`) until the
 * lifecycle swaps a real backend in. It never serves and never starts.
 */
export class UnloadedBackend extends Backend {
  constructor(info: BackendInfo, descriptor: Descriptor, why = 'not loaded (on demand)') {
    super(info, descriptor, () => {});
    this.setState('stopped', why);
  }
  get url(): string | undefined {
    return undefined;
  }
  /** A load of this entry is under way (waiting for room or its turn): counted as loading, so requests queue for it. */
  pending(why: string): void {
    this.setState('starting', why);
  }
  async start(): Promise<void> {}
  async stop(): Promise<void> {}
}
