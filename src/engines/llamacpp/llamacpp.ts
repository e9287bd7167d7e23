/**
 * The `llamacpp` engine: the node runs llama.cpp's llama-server itself, one
 * process per backend (SPEC section 3).
 *
 * Life of a backend:
 * 1. Wait for the node's load lock (one model load at a time), pick a free
 *    loopback port, spawn
 *    `BINARY --model PATH --host H --port P --parallel N
 *    --ctx-size context×parallel ...args` in its own process group, with
 *    VIIWORK_MESH_SECRET and VIIWORK_MESH_SECRET_PREV removed from its
 *    environment. Every output line is logged as `[model/idx] line`.
 * 2. Loading: `GET /health` every `loadPollMs` (500 ms). 503 (loading) or a
 *    refused connection (not listening yet) is no failure until
 *    `startup_timeout` has passed since the spawn; then it is one. A progress
 *    line is logged every 30 s. On 200 it reads `/props` (build info, the
 *    `onProps` version gate), releases the load lock and turns healthy.
 * 3. Running: `GET /health` every `healthIntervalMs` (5 s). A refused or
 *    reset connection, the process exiting, or three failed checks in a row
 *    (an error status or no answer in time) is a failure; one or two failed
 *    checks make it `unhealthy` until a check passes again.
 * 4. A failure kills the process (SIGTERM, SIGKILL after `killTimeoutMs`)
 *    and restarts it after `restartDelayMs`, through the load lock again.
 *    Restart budget: at most 3 restarts within any 10 minutes; a failure
 *    when 3 restarts already lie in the window marks the backend `dead` (no
 *    more restarts; SIGHUP or a node restart brings it back, or revive()).
 *    Refill: a run that stays healthy for `stableAfterMs` (2 minutes) clears
 *    the restart history at once; older restarts also age out of the window.
 *    A binary that cannot be run at all (ENOENT, EACCES) is dead at once.
 * 5. stop(): SIGTERM to the process group, SIGKILL after `killTimeoutMs`
 *    (30 s); resolves once the process has exited. Should the node exit
 *    without stopping its backends, an exit hook SIGKILLs every engine it
 *    started, so none is left behind.
 */
import { engineEnv, engineHost, freePort } from './engine-env.ts';
import { spawn, type ChildProcess } from 'node:child_process';
import { findExecutable } from '../../config/executable.ts';
import { forgetEngine, parentDeathPrefix, reapLeftover, recordEngine } from './leftovers.ts';
import readline from 'node:readline';
import type { Descriptor } from '../../workloads/workloads.ts';
import { Backend, type BackendInfo, type Logger } from '../backend.ts';
import { describeOutcome, fetchProps, formatMs, probe, Ticker, type EngineProps } from '../health.ts';
import { engineLoadLock, type LoadLock } from '../load-lock.ts';
import { tokenizeCount } from '../tokenize.ts';
import { parseKvLine, type KvReport } from './kv-log.ts';
import { cacheRamPlan, poolSettings, supportsCacheRam } from './cache-ram.ts';

export { engineEnv, engineHost, freePort, hideConfiguredKeys, hideFromEngines } from './engine-env.ts';
import { gguf } from '@huggingface/gguf';
import { kvBytesPerToken as kvPerToken, shapeFromMetadata } from '../gguf-shape.ts';

/** KV bytes one token takes in a slot of this GGUF (all layers, K and V at f16); null when its header cannot be read. */
export async function kvBytesPerToken(file: string): Promise<number | null> {
  try {
    const { metadata } = await gguf(file, { allowLocalFile: true });
    return kvPerToken(shapeFromMetadata(metadata as unknown as Record<string, unknown>));
  } catch {
    return null;
  }
}

export interface LlamacppConfig {
  /** llama-server executable: a name looked up in PATH or an absolute path. */
  binary: string;
  /** Extra arguments, after the ones the node sets. */
  args: string[];
  /** The GGUF model file. */
  path: string;
  /** How long a load may take before it counts as a failure (config `startup_timeout`). */
  startupTimeoutMs: number;
  /** The host-RAM prompt cache in MiB (config `cache_ram`; 0: off); undefined: the engine's default, not passed. */
  cacheRamMib?: number;
}

export interface LlamacppOptions {
  /** Health probe interval once healthy (default 5000 ms). */
  healthIntervalMs?: number;
  /** Health probe interval while loading (default 500 ms). */
  loadPollMs?: number;
  /** Deadline of one probe (default 5000 ms). */
  probeTimeoutMs?: number;
  /** Failed checks in a row (not counting refused/reset, which restart at once) before a restart (default 3). */
  failuresBeforeRestart?: number;
  /** SIGKILL this long after SIGTERM (default 30000 ms). */
  killTimeoutMs?: number;
  /** The window of the restart budget (default 600000 ms = 10 m). */
  restartWindowMs?: number;
  /** Restarts allowed within the window (default 3). */
  maxRestarts?: number;
  /** A run healthy this long clears the restart history (default 120000 ms). */
  stableAfterMs?: number;
  /** Pause between a failure and the restart (default 1000 ms). */
  restartDelayMs?: number;
  /** Log "still loading" this often (default 30000 ms). */
  progressLogMs?: number;
  /** The node's load lock (default: the shared one). */
  loadLock?: LoadLock;
  /** Extra environment for the engine (the mesh secrets are removed from it all the same). */
  env?: Record<string, string | undefined>;
  /** See OpenAIBackendOptions.onProps: a version gate applied before the backend turns healthy. */
  onProps?: (props: EngineProps, backend: LlamacppBackend) => Descriptor | undefined | void;
  /** node.state_dir: engines started are recorded here, and one left running by an earlier run is killed (engines/llamacpp/leftovers.ts). */
  stateDir?: string;
  /** Keeps the slots' prompts over a stop (SPEC section 13, "Kept over a restart"); absent: nothing is kept. */
  keeper?: SlotKeeper;
}

/**
 * What the node keeps of a backend's slots over a stop (survive/slot-store.ts): where llama-server saves slot files
 * (`--slot-save-path`), saving them before the engine stops, restoring them once it is up and before it serves.
 * Neither call may throw; each is bounded by its maker.
 */
export interface SlotKeeper {
  /** The directory for `--slot-save-path`, made; undefined: nothing is kept for this backend. */
  dirFor(backend: LlamacppBackend): string | undefined;
  /** The engine at `url` is up and serves nothing yet. */
  restore(backend: LlamacppBackend, url: string): Promise<void>;
  /** The engine at `url` is about to be stopped. */
  save(backend: LlamacppBackend, url: string): Promise<void>;
}

/** llama-server's command line for one backend. */
export function llamaServerArgs(cfg: Pick<LlamacppConfig, 'path' | 'args'>, host: string, port: number, parallel: number, context: number): string[] {
  return ['--model', cfg.path, '--host', host, '--port', String(port), '--parallel', String(parallel), '--ctx-size', String(context * parallel), ...cfg.args];
}

// Every engine process this node started and that has not exited yet: killed
// on the way out should the node exit without stopping them.
const liveGroups = new Set<number>();
let exitHookInstalled = false;
export function trackChild(pid: number): void {
  liveGroups.add(pid);
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const p of liveGroups) killGroup(p, 'SIGKILL');
  });
}

/** Signal the process group led by `pid` (the engine and anything it spawned); falls back to the process alone. */
export function killGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    try {
      process.kill(pid, signal);
    } catch {
      // gone already
    }
  }
}

interface Run {
  child: ChildProcess;
  pid: number | undefined;
  port: number;
  url: string;
  spawnedAt: number;
  phase: 'loading' | 'up';
  /** Failed checks in a row while up. */
  failures: number;
  /** Done with: failed, stopped or replaced. */
  ended: boolean;
  exited: boolean;
  exitPromise: Promise<void>;
  markExited: () => void;
  release: (() => void) | undefined;
  ticker: Ticker;
  abort: AbortController;
  stableTimer: NodeJS.Timeout | undefined;
  lastProgressLog: number;
}

export class LlamacppBackend extends Backend {
  readonly #cfg: LlamacppConfig;
  readonly #opts: Required<Omit<LlamacppOptions, 'onProps' | 'stateDir' | 'keeper'>> & Pick<LlamacppOptions, 'onProps' | 'stateDir' | 'keeper'>;
  #run: Run | undefined;
  #restartTimes: number[] = [];
  #restarts = 0;
  #stopping = false;
  #stopPromise: Promise<void> | undefined;
  #startPromise: Promise<void> | undefined;
  #launchAbort: AbortController | undefined;
  #restartTimer: NodeJS.Timeout | undefined;
  #tail: string[] = [];
  #engineKv: KvReport | undefined;

  constructor(info: BackendInfo, descriptor: Descriptor, cfg: LlamacppConfig, log: Logger, opts: LlamacppOptions = {}) {
    super(info, descriptor, log);
    this.#cfg = cfg;
    this.#opts = {
      healthIntervalMs: opts.healthIntervalMs ?? 5000,
      loadPollMs: opts.loadPollMs ?? 500,
      probeTimeoutMs: opts.probeTimeoutMs ?? 5000,
      failuresBeforeRestart: opts.failuresBeforeRestart ?? 3,
      killTimeoutMs: opts.killTimeoutMs ?? 30_000,
      restartWindowMs: opts.restartWindowMs ?? 600_000,
      maxRestarts: opts.maxRestarts ?? 3,
      stableAfterMs: opts.stableAfterMs ?? 120_000,
      restartDelayMs: opts.restartDelayMs ?? 1000,
      progressLogMs: opts.progressLogMs ?? 30_000,
      loadLock: opts.loadLock ?? engineLoadLock,
      env: opts.env ?? {},
      onProps: opts.onProps,
      stateDir: opts.stateDir,
      keeper: opts.keeper,
    };
  }

  /** The GGUF this backend runs and the arguments the operator added: what a saved slot file is only valid for. */
  get modelPath(): string {
    return this.#cfg.path;
  }
  get extraArgs(): readonly string[] {
    return this.#cfg.args;
  }

  /** http://127.0.0.1:<port> of the running process; undefined when none runs. */
  get url(): string | undefined {
    const r = this.#run;
    return r && !r.exited ? r.url : undefined;
  }

  /** llama-server's /tokenize. */
  override async countTokens(text: string, signal: AbortSignal): Promise<number | undefined> {
    const url = this.url;
    return url ? tokenizeCount(url, this.authHeaders(), text, signal) : undefined;
  }

  /** pid of the running engine process, if any. */
  get pid(): number | undefined {
    const r = this.#run;
    return r && !r.exited ? r.pid : undefined;
  }
  /** Restarts since this backend was created (for viiwork_engine_restarts_total). */
  get restarts(): number {
    return this.#restarts;
  }
  /** Restarts that count against the budget now. */
  get restartsInWindow(): number {
    this.#pruneRestarts(Date.now());
    return this.#restartTimes.length;
  }
  /** The last lines the engine printed (up to 20), for error reports. */
  get outputTail(): readonly string[] {
    return this.#tail;
  }
  /**
   * The KV cache the running engine says it allocated, when it says so
   * (kv-log.ts: b4748 at default verbosity; today's build at `-lv 4` or with
   * `--log-jsonl`); undefined until then.
   */
  get engineKv(): KvReport | undefined {
    return this.#engineKv;
  }

  /** Resolves once the backend is healthy, dead or stopped. Never throws. */
  start(): Promise<void> {
    if (this.#stopping) return Promise.resolve();
    if (!this.#startPromise) {
      this.#startPromise = new Promise<void>((resolve) => {
        const settle = () => {
          if (this.state === 'healthy' || this.state === 'dead' || this.state === 'stopped') {
            this.off('state', settle);
            resolve();
          }
        };
        this.on('state', settle);
      });
      void this.#launch();
    }
    return this.#startPromise;
  }

  /**
   * Bring a dead backend back: clear the restart budget and start again.
   * Resolves like start(). Does nothing unless the backend is dead.
   */
  revive(): Promise<void> {
    if (this.state !== 'dead' || this.#stopping) return Promise.resolve();
    this.#restartTimes = [];
    this.#startPromise = undefined;
    this.setState('starting', 'revived');
    return this.start();
  }

  /** SIGTERM, SIGKILL after killTimeoutMs; resolves when the process has exited. Idempotent. */
  stop(): Promise<void> {
    if (this.#stopPromise) return this.#stopPromise;
    this.#stopping = true;
    this.#stopPromise = (async () => {
      clearTimeout(this.#restartTimer);
      this.#launchAbort?.abort(new Error('backend stopped'));
      const run = this.#run;
      if (run) {
        // Before the engine goes, what its slots hold is saved (only an engine that came up and still runs has any).
        if (run.phase === 'up' && !run.exited && this.state === 'healthy') await this.#opts.keeper?.save(this, run.url);
        this.#endRun(run);
        await this.#terminate(run);
      }
      this.setState('stopped', 'stopped');
    })();
    return this.#stopPromise;
  }

  /** `--cache-ram` and friends for this engine, and the pool the cache model then counts (cache-ram.ts). */
  async #cacheRam(): Promise<string[]> {
    if (this.#cfg.cacheRamMib === undefined) return [];
    const plan = cacheRamPlan(this.#cfg.cacheRamMib, this.#cfg.args, await supportsCacheRam(this.#cfg.binary));
    this.#kvBytesPerToken ??= await kvBytesPerToken(this.#cfg.path);
    this.promptPool = poolSettings(plan, this.#kvBytesPerToken ?? undefined);
    return plan.args;
  }

  /** The model's KV bytes per token (null: its GGUF could not be read), read once. */
  #kvBytesPerToken: number | null | undefined;

  async #launch(): Promise<void> {
    if (this.#stopping) return;
    const lock = this.#opts.loadLock;
    const abort = (this.#launchAbort = new AbortController());
    if (lock.held) this.setState('starting', `waiting for ${lock.holder ?? 'another engine'} to finish loading`);
    let release: () => void;
    try {
      release = await lock.acquire(this.id, abort.signal);
    } catch {
      return; // stopped while waiting
    }
    const host = engineHost();
    let port: number;
    try {
      port = await freePort(host);
    } catch (err) {
      release();
      this.#giveUp(`no free loopback port: ${(err as Error).message}`);
      return;
    }
    if (this.#stopping) {
      release();
      return;
    }

    const args = llamaServerArgs(this.#cfg, host, port, this.info.parallel, this.info.context);
    // The RAM prompt cache: the node sets it (when the engine has one), so its cache model knows the pool.
    args.push(...(await this.#cacheRam()));
    const slotDir = this.#opts.keeper?.dirFor(this);
    if (slotDir) args.push('--slot-save-path', slotDir);
    // The key goes on the command line, where llama-server reads it; no log line prints the arguments.
    if (this.apiKey) args.push('--api-key', this.apiKey);
    let child: ChildProcess;
    try {
      const state = this.#opts.stateDir;
      if (state) {
        const reaped = reapLeftover(state, this.id);
        if (reaped) this.log(`backend ${this.id}: ${reaped}`, { backend: this.id });
      }
      const [cmd, ...prefix] = [...parentDeathPrefix(), this.#cfg.binary];
      // setpriv is used only for a binary that exists, so a missing one still fails here as "cannot run".
      const tied = prefix.length > 0 && findExecutable(this.#cfg.binary, process.env.PATH ?? '', process.cwd()).ok;
      child = tied
        ? spawn(cmd, [...prefix, ...args], { env: engineEnv(this.#opts.env), stdio: ['ignore', 'pipe', 'pipe'], detached: true })
        : spawn(this.#cfg.binary, args, { env: engineEnv(this.#opts.env), stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    } catch (err) {
      release();
      this.#giveUp(`cannot run ${this.#cfg.binary}: ${(err as Error).message}`);
      return;
    }
    let markExited!: () => void;
    const exitPromise = new Promise<void>((r) => (markExited = r));
    const run: Run = {
      child,
      pid: child.pid,
      port,
      url: `http://${host}:${port}`,
      spawnedAt: Date.now(),
      phase: 'loading',
      failures: 0,
      ended: false,
      exited: false,
      exitPromise,
      markExited,
      release,
      ticker: new Ticker(() => this.#check(run), this.#opts.loadPollMs),
      abort: new AbortController(),
      stableTimer: undefined,
      lastProgressLog: Date.now(),
    };
    this.#run = run;
    this.#tail = [];
    this.#engineKv = undefined;

    child.once('error', (err: NodeJS.ErrnoException) => {
      if (run.pid !== undefined) return; // errors of a running child (e.g. a failed kill) change nothing here
      run.exited = true;
      run.markExited();
      this.#endRun(run);
      if (!this.#stopping) this.#giveUp(`cannot run ${this.#cfg.binary}: ${err.code ?? err.message}`);
    });
    if (run.pid === undefined) return; // the 'error' event follows
    trackChild(run.pid);
    if (this.#opts.stateDir) recordEngine(this.#opts.stateDir, this.id, { pid: run.pid, port, binary: this.#cfg.binary });
    child.once('exit', (code, signal) => this.#onExit(run, code, signal));
    this.#pipeOutput(child);
    this.emit('spawn', { pid: run.pid, port });
    this.setState('starting', `loading ${this.#cfg.path} (pid ${run.pid}, port ${port})`);
    run.ticker.start(Math.min(this.#opts.loadPollMs, 100));
  }

  #pipeOutput(child: ChildProcess): void {
    const prefix = `[${this.id}]`;
    for (const [stream, input] of [
      ['stdout', child.stdout],
      ['stderr', child.stderr],
    ] as const) {
      if (!input) continue;
      const rl = readline.createInterface({ input, crlfDelay: Infinity });
      rl.on('line', (line) => {
        this.#tail.push(line);
        if (this.#tail.length > 20) this.#tail.shift();
        this.log(`${prefix} ${line}`, { backend: this.id, stream, engine_output: true });
        this.#noteKv(line);
        this.emit('output', line, stream);
      });
    }
  }

  // One line in the node's own words whatever the engine's format, so an operator can set it beside memory: auto.
  #noteKv(line: string): void {
    const kv = parseKvLine(line);
    if (!kv) return;
    this.#engineKv = kv;
    this.log(`backend ${this.id}: llama-server allocated a KV cache of ${(kv.bytes / 1024 / 1024).toFixed(2)} MiB`, { backend: this.id, kv_bytes: kv.bytes });
    this.emit('kv', kv);
  }

  protected override async recheck(): Promise<void> {
    const run = this.#run;
    if (run && !run.ended && run.phase === 'up') await this.#check(run);
  }

  async #check(run: Run): Promise<void> {
    if (run.ended) return;
    const o = await probe(run.url, '/health', { timeoutMs: this.#opts.probeTimeoutMs, signal: run.abort.signal, headers: this.authHeaders() });
    if (run.ended) return;
    const now = Date.now();
    this.markChecked();

    if (run.phase === 'loading') {
      if (o.kind === 'ok') return this.#becameHealthy(run);
      const elapsed = now - run.spawnedAt;
      if (elapsed >= this.#cfg.startupTimeoutMs) {
        return this.#fail(run, `not healthy ${formatMs(this.#cfg.startupTimeoutMs)} after start (startup_timeout); last ${describeOutcome('/health', o)}`);
      }
      if (now - run.lastProgressLog >= this.#opts.progressLogMs) {
        run.lastProgressLog = now;
        this.log(`backend ${this.id} still loading after ${formatMs(Math.round(elapsed / 1000) * 1000)} (startup_timeout ${formatMs(this.#cfg.startupTimeoutMs)})`, { backend: this.id });
      }
      return;
    }

    if (o.kind === 'ok') {
      if (run.failures > 0 || this.state !== 'healthy') {
        run.failures = 0;
        this.setState('healthy', `health check passed again (pid ${run.pid})`);
      }
      return;
    }
    if (o.kind === 'refused' || o.kind === 'reset') return this.#fail(run, `health check: ${o.message}`);
    run.failures++;
    const what = describeOutcome('/health', o);
    if (run.failures >= this.#opts.failuresBeforeRestart) return this.#fail(run, `${run.failures} health checks failed in a row; last ${what}`);
    this.setState('unhealthy', `health check failed (${run.failures} of ${this.#opts.failuresBeforeRestart}): ${what}`);
  }

  async #becameHealthy(run: Run): Promise<void> {
    run.phase = 'up';
    const props = await fetchProps(run.url, { timeoutMs: this.#opts.probeTimeoutMs, signal: run.abort.signal, headers: this.authHeaders() });
    if (run.ended) return;
    if (props) {
      if (props.buildInfo && props.buildInfo !== this.engineProps?.buildInfo) this.log(`backend ${this.id}: llama-server build ${props.buildInfo}`, { backend: this.id, build: props.buildInfo });
      this.engineProps = props;
      const d = this.#opts.onProps?.(props, this);
      if (d) this.setDescriptor(d);
    }
    // Kept slots go back in before the first request can reach the engine (and while the load lock is held).
    if (this.#opts.keeper) await this.#opts.keeper.restore(this, run.url);
    if (run.ended) return;
    run.release?.();
    run.release = undefined;
    run.ticker.setInterval(this.#opts.healthIntervalMs);
    run.stableTimer = setTimeout(() => {
      if (run.ended || this.#restartTimes.length === 0) return;
      this.#restartTimes = [];
      this.log(`backend ${this.id} healthy for ${formatMs(this.#opts.stableAfterMs)}; restart budget refilled`, { backend: this.id });
    }, this.#opts.stableAfterMs);
    run.stableTimer.unref();
    this.setState('healthy', `serving on ${run.url} (pid ${run.pid})`);
  }

  #onExit(run: Run, code: number | null, signal: NodeJS.Signals | null): void {
    run.exited = true;
    if (run.pid !== undefined) liveGroups.delete(run.pid);
    if (this.#opts.stateDir && run.pid !== undefined) forgetEngine(this.#opts.stateDir, this.id, run.pid);
    run.markExited();
    this.emit('exit', { pid: run.pid, code, signal });
    if (run.ended) return;
    const how = code !== null ? `exited with code ${code}` : `was killed by ${signal}`;
    const last = this.#tail.at(-1);
    void this.#fail(run, `llama-server ${how}${last ? ` (last output: ${JSON.stringify(last.slice(0, 200))})` : ''}`);
  }

  /** Mark a run finished with: no more checks, no more lock. Idempotent. */
  #endRun(run: Run): void {
    run.ended = true;
    run.ticker.stop();
    clearTimeout(run.stableTimer);
    run.abort.abort();
    run.release?.();
    run.release = undefined;
  }

  async #fail(run: Run, reason: string): Promise<void> {
    if (run.ended) return;
    this.#endRun(run);
    if (this.#stopping) return;
    const now = Date.now();
    this.#pruneRestarts(now);
    if (this.#restartTimes.length >= this.#opts.maxRestarts) {
      const n = this.#restartTimes.length;
      this.#giveUp(`failed ${n + 1} times in ${formatMs(this.#opts.restartWindowMs)} (${n} restarts); last: ${reason}`);
      await this.#terminate(run);
      return;
    }
    this.#restartTimes.push(now);
    this.#restarts++;
    this.emit('restart', reason);
    this.setState('unhealthy', `${reason}; restarting (restart ${this.#restartTimes.length} of ${this.#opts.maxRestarts} allowed in ${formatMs(this.#opts.restartWindowMs)})`);
    await this.#terminate(run);
    if (this.#stopping) return;
    this.#restartTimer = setTimeout(() => void this.#launch(), this.#opts.restartDelayMs);
  }

  #giveUp(reason: string): void {
    clearTimeout(this.#restartTimer);
    this.setState('dead', reason, `backend ${this.id} is dead: ${reason}; fix the engine and send SIGHUP or restart viiwork`);
  }

  #pruneRestarts(now: number): void {
    const from = now - this.#opts.restartWindowMs;
    this.#restartTimes = this.#restartTimes.filter((t) => t > from);
  }

  /** SIGTERM the engine's group, SIGKILL after killTimeoutMs; resolves once it has exited. */
  async #terminate(run: Run): Promise<void> {
    if (run.pid === undefined) return;
    if (!run.exited) {
      killGroup(run.pid, 'SIGTERM');
      const timer = setTimeout(() => {
        if (!run.exited) {
          this.log(`backend ${this.id}: pid ${run.pid} ignored SIGTERM for ${formatMs(this.#opts.killTimeoutMs)}; sending SIGKILL`, { backend: this.id });
          killGroup(run.pid!, 'SIGKILL');
        }
      }, this.#opts.killTimeoutMs);
      await run.exitPromise;
      clearTimeout(timer);
    }
    // Anything the engine left in its process group goes too.
    try {
      process.kill(-run.pid, 'SIGKILL');
    } catch {
      // the group is empty: the usual case
    }
  }
}
