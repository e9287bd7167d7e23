/**
 * The wait queue of one (model, workload) on the entry node. A waiter is a
 * request with an `attempt` function that tries to place it; `pump()` walks
 * the queue head first and places every waiter it can. A waiter that cannot
 * be placed (pinned to a full host, say) is passed over and does not block
 * the ones behind it. An attempt that waits for something with a deadline
 * of its own (a warm host, for at most the time it saves) asks to be tried
 * again then through `wake`.
 *
 * The order of a pass is fair.ts's: priority bands, then the key with the
 * least weighted service (its virtual token counter), then arrival. Each
 * waiter is tried once per pass; after each placement the rest are ordered
 * again, since the placed key's counter grew. With one anonymous flow (no
 * keys) that is the arrival order, as it always was.
 */
import type { Gone } from '../http/gone.ts';
import { ANONYMOUS_FLOW, charge, liftedCounter, serviceOrder, type Flow } from './fair.ts';
import { Reentrant } from './reentrant.ts';

export type QueueOutcome<T> =
  | { ok: true; value: T; queuedMs: number }
  | { ok: false; reason: 'full' | 'timeout' | 'aborted'; queuedMs: number };

/** Try to place the waiter; `wake(at)`: try again at clock time `at` even if nothing else pumps the queue. */
export type Attempt<T> = (wake: (at: number) => void) => T | undefined;

interface Waiter<T> {
  attempt: Attempt<T>;
  flow: Flow;
  enqueuedAt: number;
  deadline: number;
  timer: NodeJS.Timeout;
  wakeTimer?: NodeJS.Timeout;
  wake: (at: number) => void;
  settle: (o: QueueOutcome<T>) => void;
}

export interface EnqueueOptions {
  /** Absolute deadline (clock ms); default now + timeout. */
  deadline?: number;
  /** Put the waiter at the head (a request whose forwards were refused goes back to the front). */
  front?: boolean;
  signal?: Gone;
  /** Whose request it is, its band and expected cost (fair.ts); default one anonymous interactive flow. */
  flow?: Flow;
}

export class WaitQueue<T> {
  readonly #waiters: Waiter<T>[] = [];
  /** Virtual token counters of the keys that have waited here since the queue was last empty. */
  readonly #counters = new Map<string, number>();
  /** Clock ms since when the queue has held a waiter without a moment empty (undefined: empty). */
  #busySince: number | undefined;
  readonly #pump = new Reentrant(() => this.#pass());

  constructor(
    readonly max: number,
    readonly timeoutMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  get depth(): number {
    return this.#waiters.length;
  }

  /**
   * Clock ms since when requests have queued here without the queue being
   * empty in between (SPEC 11's sustained queueing: with short requests the
   * oldest waiter changes all the time while the queue never drains);
   * undefined when none waits.
   */
  get queuedSince(): number | undefined {
    return this.#busySince;
  }


  /**
   * Wait for a placement. Resolves with the attempt's value, or with a
   * reason: `full` at once when `max` waiters are already here, `timeout`
   * at the deadline, `aborted` when the client went away.
   */
  enqueue(attempt: Attempt<T>, opts: EnqueueOptions = {}): Promise<QueueOutcome<T>> {
    const enqueuedAt = this.now();
    if (this.#waiters.length >= this.max) return Promise.resolve({ ok: false, reason: 'full', queuedMs: 0 });
    return new Promise((resolve) => {
      const deadline = opts.deadline ?? enqueuedAt + this.timeoutMs;
      const flow = opts.flow ?? ANONYMOUS_FLOW;
      const waiter: Waiter<T> = {
        attempt,
        flow,
        enqueuedAt,
        deadline,
        timer: setTimeout(() => finish({ ok: false, reason: 'timeout', queuedMs: this.now() - enqueuedAt }), Math.max(0, deadline - enqueuedAt)),
        settle: (o) => finish(o),
        wake: (at) => {
          clearTimeout(waiter.wakeTimer);
          waiter.wakeTimer = setTimeout(() => this.pump(), Math.max(0, at - this.now()));
        },
      };
      const onAbort = () => finish({ ok: false, reason: 'aborted', queuedMs: this.now() - enqueuedAt });
      const finish = (o: QueueOutcome<T>) => {
        const i = this.#waiters.indexOf(waiter);
        if (i < 0) return;
        this.#waiters.splice(i, 1);
        if (this.#waiters.length === 0) {
          this.#busySince = undefined;
          this.#counters.clear();
        }
        clearTimeout(waiter.timer);
        clearTimeout(waiter.wakeTimer);
        opts.signal?.removeEventListener('abort', onAbort);
        resolve(o);
      };
      if (opts.signal?.aborted) return resolve({ ok: false, reason: 'aborted', queuedMs: 0 });
      opts.signal?.addEventListener('abort', onAbort, { once: true });
      if (!this.#waiters.some((w) => w.flow.key === flow.key)) {
        const waiting = this.#waiters.map((w) => w.flow);
        this.#counters.set(flow.key, liftedCounter(this.#counters.get(flow.key), flow.key, flow.band, waiting, this.#counters));
      }
      if (opts.front) this.#waiters.unshift(waiter);
      else this.#waiters.push(waiter);
      this.pump();
      // Placed at once (the pump above) is not queueing.
      if (this.#waiters.length > 0) this.#busySince ??= enqueuedAt;
    });
  }

  /**
   * What a key was served beyond what it was charged when placed (the
   * engine's usage against the estimate; negative when it used less): its
   * counter moves by that, weighted. Nothing for a key no longer counted.
   */
  settle(flow: Pick<Flow, 'key' | 'weight'>, extraCost: number): void {
    const c = this.#counters.get(flow.key);
    if (c !== undefined) this.#counters.set(flow.key, Math.max(0, c + charge({ cost: extraCost, weight: flow.weight })));
  }

  /** The counters now (tests, dashboards). */
  counters(): ReadonlyMap<string, number> {
    return this.#counters;
  }

  /** One pass: each waiter tried once, in service order, ordered again after each placement. */
  #pass(): void {
    const tried = new Set<Waiter<T>>();
    for (;;) {
      const rest = this.#waiters.filter((w) => !tried.has(w));
      if (rest.length === 0) return;
      let placed = false;
      for (const i of serviceOrder(rest.map((w) => w.flow), this.#counters)) {
        const w = rest[i];
        if (!this.#waiters.includes(w)) continue;
        tried.add(w);
        const value = w.attempt(w.wake);
        if (value === undefined) continue;
        this.#counters.set(w.flow.key, (this.#counters.get(w.flow.key) ?? 0) + charge(w.flow));
        w.settle({ ok: true, value, queuedMs: this.now() - w.enqueuedAt });
        placed = true;
        break;
      }
      if (!placed) return;
    }
  }

  /** Place every waiter that can be placed now, in service order. Re-entrant calls fold into one more pass. */
  pump(): void {
    this.#pump.run();
  }
}

/** The queues of one node, keyed by (model, workload). */
export class QueueSet<T> {
  readonly #queues = new Map<string, WaitQueue<T>>();

  constructor(
    private max: number,
    private timeoutMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  get(model: string, workload: string): WaitQueue<T> {
    const key = `${model}\0${workload}`;
    let q = this.#queues.get(key);
    if (!q) this.#queues.set(key, (q = new WaitQueue<T>(this.max, this.timeoutMs, this.now)));
    return q;
  }

  depth(model: string, workload?: string): number {
    let n = 0;
    for (const [key, q] of this.#queues) {
      const [m, w] = key.split('\0');
      if (m === model && (workload === undefined || w === workload)) n += q.depth;
    }
    return n;
  }

  entries(): { model: string; workload: string; depth: number }[] {
    return [...this.#queues].map(([key, q]) => {
      const [model, workload] = key.split('\0');
      return { model, workload, depth: q.depth };
    });
  }

  pumpAll(): void {
    for (const q of this.#queues.values()) if (q.depth > 0) q.pump();
  }
}
