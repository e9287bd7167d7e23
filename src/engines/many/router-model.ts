/**
 * One model of llama-server in router mode (SPEC section 3, "Endpoints that
 * serve many models"; ../shared/llama-server-today.md section 5). The router
 * runs a child process per loaded model; the node never starts or kills
 * those, it asks the router:
 *
 * - `start()` asks `POST /models/load` (one already running counts) and
 *   waits for the model's status to read `loaded` (a failed load, `failed`
 *   with an exit code, ends it as `dead`; so does `LOAD_TIMEOUT_MS`). It then
 *   reads the child's `/props?model=…&autoload=false` for its slots
 *   (`total_slots`, the backend's `parallel`), their context (`n_ctx`) and
 *   the version gate, and turns healthy.
 * - While healthy it reads the model's status every `WATCH_INTERVAL_MS` from
 *   the router's list (shared by the router's models, engines/many/router-client.ts).
 *   A model the router unloaded by itself (its `--models-max`, or another
 *   client's unload): an `always` entry's backend asks for it again; an
 *   on-demand one says `lost`, and the lifecycle counts the model unloaded,
 *   so the next request loads it again through placement like any other.
 * - `unloadEngine()` (the lifecycle's idle, room and operator unloads) asks
 *   `POST /models/unload` and waits until the router says unloaded; `stop()`
 *   only stops watching, so a node that stops or reloads leaves the router's
 *   models as they are (the next start finds them loaded and takes them in).
 *
 * Requests go to the router itself with the model's name in the body, so the
 * router's proxy is the hop to the child (whose port is the OS's choice).
 */
import type { Descriptor } from '../../workloads/workloads.ts';
import { Backend, type BackendInfo, type Logger } from '../backend.ts';
import { Ticker, type EngineProps } from '../health.ts';
import { parallelFromArgs, routerState, type RouterStatus } from './listing.ts';
import { routerClient, type RouterClient } from './router-client.ts';

/** How long a load may take before it counts as failed (a large model from a slow disk). */
export const LOAD_TIMEOUT_MS = 10 * 60_000;
/** How long an unload waits for the router (its own stop timeout is 10 s, then it kills the child). */
const UNLOAD_WAIT_MS = 30_000;
/**
 * How often a loaded model's status is read: every second, since the router
 * may drop a model at any request for another (its --models-max); the list
 * is shared by the router's models, so this is one GET per router.
 */
export const WATCH_INTERVAL_MS = 1000;
/** A model still unloaded (not failed) this long after the router accepted its load did not start loading. */
const IDLE_AFTER_ASK_MS = 5000;
/** How often a load or unload under way reads the status. */
const WATCH_MS = 200;

export interface RouterModelOptions {
  healthIntervalMs?: number;
  /** `always` entries: a model the router dropped is asked for again rather than given up. */
  keepLoaded?: boolean;
  /** The version gate, as for any llama-server (engines/factory.ts). */
  onProps?: (props: EngineProps) => Descriptor | undefined | void;
}

export class RouterModelBackend extends Backend {
  readonly #client: RouterClient;
  readonly #opts: RouterModelOptions;
  readonly #ticker: Ticker;
  #slots: number | undefined;
  #context: number | undefined;
  #stopped = false;

  constructor(info: BackendInfo, descriptor: Descriptor, url: string, log: Logger, opts: RouterModelOptions = {}) {
    super(info, descriptor, log);
    this.#opts = opts;
    this.#client = routerClient(url, () => this.authHeaders());
    this.#ticker = new Ticker(() => this.#watch(), opts.healthIntervalMs ?? WATCH_INTERVAL_MS);
  }

  get url(): string {
    return this.#client.base;
  }

  override get parallel(): number {
    return this.#slots ?? this.info.parallel;
  }

  override get context(): number {
    return this.#context ?? this.info.context;
  }

  get #model(): string {
    return this.info.model;
  }

  async start(): Promise<void> {
    if (this.#stopped) return;
    await this.#load('loading on the router');
    if (!this.#stopped && this.state === 'healthy') this.#ticker.start();
  }

  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    this.#ticker.stop();
    this.setState('stopped', 'stopped');
  }

  override async unloadEngine(): Promise<void> {
    this.#ticker.stop();
    const a = await this.#client.unload(this.#model);
    if (!a.ok) this.log(`backend ${this.id}: the router did not unload ${this.#model}: ${a.message}`, { backend: this.id });
    else await this.#until((s) => routerState(s) === 'unloaded', UNLOAD_WAIT_MS);
    await this.stop();
  }

  /** Ask for the model and wait until the router serves it; healthy with its slots read, or dead with the router's reason. */
  async #load(why: string): Promise<void> {
    this.setState('starting', why);
    this.markChecked();
    const asked = await this.#client.load(this.#model);
    if (this.#stopped) return;
    if (!asked.ok) return this.setState('dead', `the router refused to load ${this.#model}: ${asked.message}`);
    // Done when loaded, or unloaded with `failed`. Unloaded without it is the moment before the router moves it to
    // loading (it does so as it answers, so this is brief); for longer than IDLE_AFTER_ASK_MS, the load did not start.
    let idleSince: number | undefined;
    const s = await this.#until(
      (st) => {
        if (routerState(st) !== 'unloaded') return routerState(st) === 'loaded';
        idleSince ??= performance.now();
        return st?.failed === true || performance.now() - idleSince > IDLE_AFTER_ASK_MS;
      },
      LOAD_TIMEOUT_MS,
      'loaded',
    );
    if (this.#stopped) return;
    if (typeof s === 'string') return this.setState('dead', s);
    if (routerState(s) !== 'loaded') {
      if (!s?.failed) return this.setState('dead', `the router accepted the load of ${this.#model} but did not start it; its log says why`);
      const code = s.exitCode !== undefined ? ` (its process exited with code ${s.exitCode})` : '';
      return this.setState('dead', `the router could not load ${this.#model}${code}; its log says why`);
    }
    await this.#readProps(s?.args ?? []);
    if (!this.#stopped) this.setState('healthy', `loaded on the router, ${this.parallel} slot(s)`);
  }

  /** Read the model's status until `done` holds; a string says why it did not get there (gone from the list, the deadline). */
  async #until(done: (s: RouterStatus | undefined) => boolean, deadlineMs: number, what = 'unloaded'): Promise<RouterStatus | undefined | string> {
    const end = performance.now() + deadlineMs;
    let last = '';
    while (!this.#stopped) {
      const l = await this.#client.list(0);
      if (typeof l === 'string') last = l;
      else {
        if (!l.ids.includes(this.#model)) return `${this.#model} is no longer listed by the router`;
        const s = l.status.get(this.#model);
        if (done(s)) return s;
      }
      if (performance.now() >= end) return `${this.#model} was not ${what} after ${Math.round(deadlineMs / 1000)} s${last ? ` (${last})` : ''}`;
      await new Promise((r) => setTimeout(r, WATCH_MS).unref());
    }
    return 'stopped';
  }

  /** The child's slots and what it says of itself; its command line (`--parallel`) is the fallback for slots. */
  async #readProps(args: readonly string[]): Promise<void> {
    const props = await this.#client.props(this.#model);
    this.#slots = props?.totalSlots && props.totalSlots > 0 ? props.totalSlots : parallelFromArgs(args);
    if (!props) return;
    this.engineProps = props;
    const nCtx = (props.raw.default_generation_settings as { n_ctx?: unknown } | undefined)?.n_ctx;
    if (typeof nCtx === 'number' && nCtx > 0) this.#context = nCtx;
    const d = this.#opts.onProps?.(props);
    if (d) this.setDescriptor(d);
  }

  /** One health round: the model's status in the router's list (shared, at most a second old). */
  async #watch(): Promise<void> {
    if (this.#stopped) return;
    const l = await this.#client.list(1000);
    if (this.#stopped) return;
    if (typeof l === 'string') return this.setState('unhealthy', l);
    if (!l.ids.includes(this.#model)) return this.setState('unhealthy', `${this.#model} is no longer listed by the router`);
    const state = routerState(l.status.get(this.#model));
    if (state === 'loaded') return this.setState('healthy', `loaded on the router, ${this.parallel} slot(s)`);
    if (state === 'loading') return this.setState('starting', 'the router is loading it again');
    const why = `the router unloaded ${this.#model} by itself (its --models-max, or another client)`;
    if (this.#opts.keepLoaded) return void (await this.#load(`${why}; loading it again`));
    this.#ticker.stop();
    this.#stopped = true;
    this.setState('stopped', why);
    this.emit('lost', why);
  }
}
