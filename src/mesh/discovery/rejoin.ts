/**
 * The rejoin loop: every `mesh.rejoin_interval` (and once at start), ask
 * every feeder for candidates and join those that are not this node and not
 * already alive, at most `concurrency` (8) joins in flight. Repeating it is
 * also how the two halves of a healed split find each other again.
 *
 * A feeder that throws or hangs costs only its own candidates for that
 * round; a round never overlaps the next (the next is scheduled when one
 * ends).
 */
import { ChangeLogger, silentLogger, type Feeder, type Logger } from './feeder.ts';

export const DEFAULT_JOIN_CONCURRENCY = 8;
export const DEFAULT_FEEDER_TIMEOUT_MS = 5000;

/** The clock functions the loop uses, injectable for tests. */
export interface LoopTimer {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

const realTimer: LoopTimer = {
  setTimeout(fn, ms) {
    const t = setTimeout(fn, ms);
    t.unref?.();
    return t;
  },
  clearTimeout(handle) {
    clearTimeout(handle as NodeJS.Timeout);
  },
};

export interface RejoinOptions {
  feeders: readonly Feeder[];
  /** Whether membership already has an alive member at this gossip address. */
  isAlive: (addr: string) => boolean;
  /** This node's own gossip address(es), never joined. */
  self: readonly string[];
  /**
   * Join one or more addresses (the loop passes one at a time). Resolves
   * when the join finished, whatever its outcome; a rejection is logged.
   */
  join: (addrs: string[]) => Promise<unknown>;
  /** Time between rounds (`mesh.rejoin_interval`). */
  intervalMs: number;
  /** Joins in flight at most. Default 8. */
  concurrency?: number;
  /** How long one feeder may take to answer. Default 5 s. */
  feederTimeoutMs?: number;
  timer?: LoopTimer;
  log?: Logger;
}

export interface RejoinRound {
  /** Every distinct candidate the feeders proposed. */
  candidates: string[];
  /** The ones joined (not self, not alive). */
  attempted: string[];
  failed: { addr: string; error: string }[];
}

function withTimeout<T>(p: Promise<T>, ms: number, timer: LoopTimer, what: string): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const h = timer.setTimeout(() => reject(new Error(`${what} took longer than ${ms} ms`)), ms);
    p.then(
      (v) => {
        timer.clearTimeout(h);
        resolve(v);
      },
      (e) => {
        timer.clearTimeout(h);
        reject(e);
      },
    );
  });
}

export class RejoinLoop {
  readonly #opts: Required<RejoinOptions>;
  readonly #feederProblems = new Map<string, ChangeLogger>();
  readonly #joinProblems = new Map<string, ChangeLogger>();
  #handle: unknown;
  #round: Promise<RejoinRound> | undefined;
  #started = false;
  #stopped = false;

  constructor(opts: RejoinOptions) {
    this.#opts = {
      concurrency: DEFAULT_JOIN_CONCURRENCY,
      feederTimeoutMs: DEFAULT_FEEDER_TIMEOUT_MS,
      timer: realTimer,
      log: silentLogger,
      ...opts,
    };
    if (!(this.#opts.concurrency >= 1)) throw new Error('RejoinLoop concurrency must be at least 1');
    for (const f of opts.feeders) this.#feederProblems.set(f.name, new ChangeLogger(this.#opts.log));
  }

  /** Run a round now, then one every interval until stop(). */
  start(): void {
    if (this.#started || this.#stopped) return;
    this.#started = true;
    this.#tick();
    this.#first = this.#round?.then(
      () => undefined,
      () => undefined,
    );
  }

  #first: Promise<void> | undefined;

  /** Resolves once the first round (started by start()) has finished, joined or not. */
  get firstRound(): Promise<void> {
    return this.#first ?? Promise.resolve();
  }

  /** Run a round soon without waiting for the interval (e.g. a feeder heard a new peer). */
  kick(): void {
    if (!this.#started || this.#stopped || this.#round) return;
    this.#opts.timer.clearTimeout(this.#handle);
    this.#tick();
  }

  #tick(): void {
    this.#handle = undefined;
    void this.runOnce()
      .catch(() => undefined)
      .then(() => {
        if (!this.#stopped) this.#handle = this.#opts.timer.setTimeout(() => this.#tick(), this.#opts.intervalMs);
      });
  }

  /** Stop scheduling rounds; resolves when the round in flight (if any) ended. */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#handle !== undefined) this.#opts.timer.clearTimeout(this.#handle);
    this.#handle = undefined;
    await this.#round?.catch(() => undefined);
  }

  /** One round; while a round runs, callers share it. */
  runOnce(): Promise<RejoinRound> {
    this.#round ??= this.#run().finally(() => {
      this.#round = undefined;
    });
    return this.#round;
  }

  async #gather(): Promise<string[]> {
    const { feeders, feederTimeoutMs, timer } = this.#opts;
    const lists = await Promise.all(
      feeders.map(async (f) => {
        const problems = this.#feederProblems.get(f.name) ?? new ChangeLogger(this.#opts.log);
        try {
          const list = await withTimeout(Promise.resolve().then(() => f.candidates()), feederTimeoutMs, timer, `discovery ${f.name}`);
          problems.ok(`discovery ${f.name} works again`);
          return Array.isArray(list) ? list.filter((a): a is string => typeof a === 'string' && a !== '') : [];
        } catch (err) {
          problems.problem(`discovery ${f.name} failed: ${(err as Error).message}`, { feeder: f.name });
          return [];
        }
      }),
    );
    return [...new Set(lists.flat())];
  }

  async #run(): Promise<RejoinRound> {
    const candidates = await this.#gather();
    const self = new Set(this.#opts.self);
    const queue = candidates.filter((a) => !self.has(a) && !this.#safeAlive(a));
    const attempted: string[] = [];
    const failed: RejoinRound['failed'] = [];
    const worker = async () => {
      for (let addr = queue.shift(); addr !== undefined; addr = queue.shift()) {
        if (this.#stopped) return;
        if (this.#safeAlive(addr)) continue; // an earlier join in this round may have brought it in
        attempted.push(addr);
        const problems = this.#joinProblems.get(addr) ?? new ChangeLogger(this.#opts.log);
        this.#joinProblems.set(addr, problems);
        try {
          await this.#opts.join([addr]);
          problems.ok(`joined ${addr}`);
        } catch (err) {
          const error = (err as Error)?.message ?? String(err);
          failed.push({ addr, error });
          problems.problem(`join ${addr} failed: ${error}`, { addr });
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(this.#opts.concurrency, queue.length) }, worker));
    // Forget the log state of addresses nobody proposes any more (bounded memory).
    const current = new Set(candidates);
    for (const addr of this.#joinProblems.keys()) if (!current.has(addr)) this.#joinProblems.delete(addr);
    return { candidates, attempted, failed };
  }

  #safeAlive(addr: string): boolean {
    try {
      return this.#opts.isAlive(addr);
    } catch {
      return false;
    }
  }
}
