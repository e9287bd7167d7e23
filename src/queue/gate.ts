/**
 * The gate in front of this node's slots (admission.ts has the rule): every
 * lease here passes it, and forwards that found every slot busy may wait in
 * its line, per model, for at most the time their entry allows.
 *
 * With nobody in a model's line a lease goes straight to the slot table: no
 * counters are kept and nothing is done per request beyond one map lookup
 * (so without keys, when no forward ever waits, leasing costs what it did).
 * While the line holds waiters, each grant charges its key's counter here,
 * a key that starts asking is lifted to the lowest counter waiting in its
 * band (VTC's rule, fair.ts), and the counters are dropped when the line
 * empties again.
 *
 * `pump()` is called after every release: it grants free slots to waiters in
 * order (band, counter, arrival), each tried once per pass. A request
 * entering here that the node's own queue places on a free slot asks the
 * gate too (tryLease), so it wins only when it outranks every waiter.
 */
import type { Gone } from '../http/gone.ts';
import { lineVerdict, mayTake } from './admission.ts';
import { charge, liftedCounter, serviceOrder, type Flow } from './fair.ts';
import { Reentrant } from './reentrant.ts';
import { mayTakeSlot, type ReserveBook } from './reserve.ts';

export type LineOutcome<L> =
  | { ok: true; lease: L; waitedMs: number }
  /**
   * `full`: the line had no room for it; `timeout`: its wait ran out;
   * `displaced`: a forward that ranks higher took its place; `aborted`: the
   * entry went away.
   */
  | { ok: false; reason: 'full' | 'timeout' | 'displaced' | 'aborted'; waitedMs: number };

export interface GateOptions<W, L> {
  /** Take a slot of `model` for `workload` now (the slot table), or undefined. */
  lease: (model: string, workload: W, sessionKey?: string) => L | undefined;
  now?: () => number;
  /** The most forwards that wait in one model's line. */
  lineMax?: number;
  /**
   * Room kept for interactive work (reserve.ts): the book that notes interactive asks, and this node's free slots of
   * (model, workload) with those held back from batch now. Absent: batch takes any free slot.
   */
  reserve?: {
    book: ReserveBook;
    room: (model: string, workload: W) => { free: number; held: number };
    /** Count an interactive lease as running until it is released (reserve.ts trackedLease); absent: not counted. */
    track?: (model: string, lease: L) => L;
  };
}

/** Forwards waiting at once for one model's slots here; past it the lowest-ranked gives way or the newcomer is refused. */
export const LINE_MAX = 64;

interface Waiter<W, L> {
  flow: Flow;
  workload: W;
  sessionKey?: string;
  at: number;
  timer: NodeJS.Timeout;
  settle: (o: LineOutcome<L>) => void;
}

interface Line<W, L> {
  waiters: Waiter<W, L>[];
  counters: Map<string, number>;
}

export class SlotGate<W, L> {
  readonly #lines = new Map<string, Line<W, L>>();
  readonly #lease: GateOptions<W, L>['lease'];
  readonly #now: () => number;
  readonly #max: number;
  readonly #reserve: GateOptions<W, L>['reserve'];
  readonly #pump = new Reentrant(() => {
    for (const [model, line] of [...this.#lines]) this.#pass(model, line);
  });

  constructor(opts: GateOptions<W, L>) {
    this.#lease = opts.lease;
    this.#now = opts.now ?? Date.now;
    this.#max = opts.lineMax ?? LINE_MAX;
    this.#reserve = opts.reserve;
  }

  /**
   * Whether `flow` (undefined: anonymous, interactive) may be leased a slot of (model, workload) as far as the room
   * kept for interactive work goes; an interactive ask is noted, so the room is kept while such requests come.
   */
  #roomFor(model: string, workload: W, flow: Flow | undefined): boolean {
    const r = this.#reserve;
    if (!r) return true;
    if (flow?.band !== 'batch') {
      r.book.note(model);
      return true;
    }
    r.book.noteBatch(model);
    const { free, held } = r.room(model, workload);
    return mayTakeSlot('batch', free, held);
  }

  /** A slot from the table; an interactive one is counted while it runs (the room kept follows how many run at once). */
  #leaseFor(model: string, workload: W, sessionKey: string | undefined, flow: Flow | undefined): L | undefined {
    const lease = this.#lease(model, workload, sessionKey);
    const track = this.#reserve?.track;
    return lease !== undefined && track && flow?.band !== 'batch' ? track(model, lease) : lease;
  }

  /** Forwards waiting for `model` here now. */
  depth(model: string): number {
    return this.#lines.get(model)?.waiters.length ?? 0;
  }

  /** The counters of a model's line (tests, dashboards); empty when none waits. */
  counters(model: string): ReadonlyMap<string, number> {
    return this.#lines.get(model)?.counters ?? new Map();
  }

  /**
   * A slot now, for a request placed here (by this node's own queue or a
   * forward that just arrived), unless a waiter for the same work ranks at
   * least as high; undefined then, or when none is free.
   */
  tryLease(model: string, workload: W, sessionKey?: string, flow?: Flow): L | undefined {
    if (!this.#roomFor(model, workload, flow)) return undefined;
    const line = this.#lines.get(model);
    if (!line || !flow) return this.#leaseFor(model, workload, sessionKey, flow);
    const rivals = line.waiters.filter((w) => w.workload === workload).map((w) => w.flow);
    if (rivals.length && !line.waiters.some((w) => w.flow.key === flow.key)) {
      line.counters.set(flow.key, liftedCounter(line.counters.get(flow.key), flow.key, flow.band, rivals, line.counters));
    }
    if (!mayTake(flow, rivals, line.counters)) return undefined;
    const lease = this.#leaseFor(model, workload, sessionKey, flow);
    if (lease !== undefined) line.counters.set(flow.key, (line.counters.get(flow.key) ?? 0) + charge(flow));
    return lease;
  }

  /**
   * Wait in `model`'s line for a slot, for at most `ms`: resolves with the
   * lease, or why not. The caller has just found no slot it may take.
   */
  wait(model: string, workload: W, sessionKey: string | undefined, flow: Flow, ms: number, signal?: Gone): Promise<LineOutcome<L>> {
    const at = this.#now();
    if (signal?.aborted) return Promise.resolve({ ok: false, reason: 'aborted', waitedMs: 0 });
    let line = this.#lines.get(model);
    if (!line) this.#lines.set(model, (line = { waiters: [], counters: new Map() }));
    const verdict = lineVerdict(line.waiters.map((w) => w.flow), flow, this.#max, line.counters);
    if (verdict.kind === 'full') {
      this.#dropIfEmpty(model, line);
      return Promise.resolve({ ok: false, reason: 'full', waitedMs: 0 });
    }
    if (verdict.kind === 'displace') line.waiters[verdict.index].settle({ ok: false, reason: 'displaced', waitedMs: this.#now() - line.waiters[verdict.index].at });
    const l = line;
    return new Promise((resolve) => {
      const onAbort = () => finish({ ok: false, reason: 'aborted', waitedMs: this.#now() - at });
      const finish = (o: LineOutcome<L>) => {
        const i = l.waiters.indexOf(waiter);
        if (i < 0) return;
        l.waiters.splice(i, 1);
        clearTimeout(waiter.timer);
        signal?.removeEventListener('abort', onAbort);
        this.#dropIfEmpty(model, l);
        resolve(o);
      };
      const waiter: Waiter<W, L> = {
        flow,
        workload,
        sessionKey,
        at,
        timer: setTimeout(() => finish({ ok: false, reason: 'timeout', waitedMs: this.#now() - at }), Math.max(0, ms)),
        settle: finish,
      };
      if (!l.waiters.some((w) => w.flow.key === flow.key)) {
        l.counters.set(flow.key, liftedCounter(l.counters.get(flow.key), flow.key, flow.band, l.waiters.map((w) => w.flow), l.counters));
      }
      // The waiter it displaced may have been the last: the line is kept for this one.
      if (this.#lines.get(model) !== l) this.#lines.set(model, l);
      l.waiters.push(waiter);
      signal?.addEventListener('abort', onAbort, { once: true });
      // A slot held back from a lower-ranked request may be free right now: the line is served at once.
      this.pump();
    });
  }

  /** Grant free slots to waiters, in order; re-entrant calls fold into one more pass. */
  pump(): void {
    if (this.#lines.size > 0) this.#pump.run();
  }

  /** Each waiter tried once, in service order, ordered again after each grant (its key's counter grew). */
  #pass(model: string, line: Line<W, L>): void {
    const tried = new Set<Waiter<W, L>>();
    for (;;) {
      const rest = line.waiters.filter((w) => !tried.has(w));
      if (rest.length === 0) return;
      let granted = false;
      for (const i of serviceOrder(rest.map((w) => w.flow), line.counters)) {
        const w = rest[i];
        tried.add(w);
        if (w.flow.band === 'batch' && !this.#roomFor(model, w.workload, w.flow)) continue;
        const lease = this.#leaseFor(model, w.workload, w.sessionKey, w.flow);
        if (lease === undefined) continue;
        line.counters.set(w.flow.key, (line.counters.get(w.flow.key) ?? 0) + charge(w.flow));
        w.settle({ ok: true, lease, waitedMs: this.#now() - w.at });
        granted = true;
        break;
      }
      if (!granted) return;
    }
  }

  #dropIfEmpty(model: string, line: Line<W, L>): void {
    if (line.waiters.length === 0 && this.#lines.get(model) === line) this.#lines.delete(model);
  }
}
