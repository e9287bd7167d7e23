/**
 * This node's own forwards and the refusal marks it holds (SPEC section 9,
 * steps 4 and 9): what the router subtracts from, and adds back to, members'
 * reports.
 *
 * - A forward in flight that started after a report's poll counts against
 *   that member's free slots (the report cannot know of it).
 * - A forward that started before the poll (so the report shows its slot
 *   busy) and has ended since frees its slot at once, without waiting for the
 *   next report.
 * - A refusal marks (member, model, workload) full until a report polled
 *   after it, or until one of this node's forwards to that member ends.
 */
import type { ForwardRecord, RefusalMark } from '../route/types.ts';

/** Ended forwards kept at most this long without a newer report (a member that stops reporting is stale anyway). */
const ENDED_KEEP_MS = 60_000;
/** A bound on the book, whatever happens to the reports. */
const MAX_RECORDS = 20_000;

export type ForwardEnd = 'served' | 'refused';

const NONE: readonly ForwardRecord[] = [];

const keyOf = (host: string, model: string) => `${host}\0${model}`;

export class ForwardBook {
  /** Forwards by (host, model), so routing reads only those of the hosts it prices. */
  readonly #byKey = new Map<string, Set<ForwardRecord>>();
  #size = 0;
  #marks: RefusalMark[] = [];

  constructor(private readonly now: () => number = Date.now) {}

  /** Count a forward from now; call the returned function once when it ends. */
  start(host: string, model: string, workload: string, target: string): (end: ForwardEnd) => void {
    const f: ForwardRecord = { host, model, workload, target, startedAt: this.now() };
    if (this.#size >= MAX_RECORDS) this.#trim();
    this.#add(f);
    let ended = false;
    return (end) => {
      if (ended) return;
      ended = true;
      if (end === 'refused') {
        // It never held a slot there: nothing to add back.
        this.#delete(f);
        return;
      }
      f.endedAt = this.now();
      // The member just freed a slot of this model: whatever it refused before is worth trying again.
      this.#marks = this.#marks.filter((m) => !(m.host === host && m.model === model));
    };
  }

  refuse(host: string, model: string, workload: string): void {
    this.#marks = this.#marks.filter((m) => !(m.host === host && m.model === model && m.workload === workload));
    this.#marks.push({ host, model, workload, at: this.now() });
  }

  /** Forget what a newer report has answered: marks before its poll, and forwards that ended before it. */
  prune(polledAt: (host: string) => number | undefined): void {
    const now = this.now();
    this.#marks = this.#marks.filter((m) => {
      const p = polledAt(m.host);
      return p === undefined || p <= m.at;
    });
    for (const f of this.#all()) {
      if (f.endedAt === undefined) continue;
      const p = polledAt(f.host);
      if ((p !== undefined && p > f.endedAt) || now - f.endedAt > ENDED_KEEP_MS) this.#delete(f);
    }
  }

  #trim(): void {
    const ended = [...this.#all()].filter((f) => f.endedAt !== undefined).sort((a, b) => a.endedAt! - b.endedAt!);
    for (const f of ended.slice(0, Math.ceil(ended.length / 2) || 0)) this.#delete(f);
  }

  *#all(): Generator<ForwardRecord> {
    for (const set of this.#byKey.values()) yield* set;
  }

  #add(f: ForwardRecord): void {
    this.#size++;
    const k = keyOf(f.host, f.model);
    let set = this.#byKey.get(k);
    if (!set) this.#byKey.set(k, (set = new Set()));
    set.add(f);
  }

  #delete(f: ForwardRecord): void {
    const k = keyOf(f.host, f.model);
    const set = this.#byKey.get(k);
    if (!set?.delete(f)) return;
    this.#size--;
    if (set.size === 0) this.#byKey.delete(k);
  }

  /** This node's forwards to `host` for `model`, in flight and recently ended. */
  readonly of = (host: string, model: string): readonly ForwardRecord[] => {
    const set = this.#byKey.get(keyOf(host, model));
    return set ? [...set] : NONE;
  };

  get inFlightCount(): number {
    let n = 0;
    for (const f of this.#all()) if (f.endedAt === undefined) n++;
    return n;
  }

  get marks(): readonly RefusalMark[] {
    return this.#marks;
  }
}
