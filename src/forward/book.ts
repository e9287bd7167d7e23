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
 * - A report that says how many of its busy slots are this node's forwards
 *   (`your_busy`) replaces both guesses: every forward in flight counts
 *   against it, and that many slots are added back (route/eligibility.ts).
 */
import { freesSlotOf, tallyOf } from '../route/eligibility.ts';
import type { ForwardRecord, ForwardTally, RefusalMark } from '../route/types.ts';

/** Ended forwards kept at most this long without a newer report (a member that stops reporting is stale anyway). */
const ENDED_KEEP_MS = 60_000;
/** A bound on the book, whatever happens to the reports. */
const MAX_RECORDS = 20_000;

export type ForwardEnd = 'served' | 'refused';

/**
 * One (member, model): forwards in flight (few: at most this node's
 * concurrency) and those ended since the member's last report (at a high
 * rate, thousands). The freed count of the ended ones is kept for the poll
 * time routing last asked about and updated as forwards end, so routing a
 * request reads the in-flight ones only, not every forward of the last
 * second.
 */
interface Bucket {
  inflight: Set<ForwardRecord>;
  ended: Set<ForwardRecord>;
  freed?: { polledAt: number; byTarget: Map<string, number> };
}

const keyOf = (host: string, model: string) => `${host}\0${model}`;

export class ForwardBook {
  /** Forwards by (host, model), so routing reads only those of the hosts it prices. */
  readonly #byKey = new Map<string, Bucket>();
  #size = 0;
  #marks: RefusalMark[] = [];

  constructor(private readonly now: () => number = Date.now) {}

  /** Count a forward from now; call the returned function once when it ends. */
  start(host: string, model: string, workload: string, target: string): (end: ForwardEnd) => void {
    const f: ForwardRecord = { host, model, workload, target, startedAt: this.now() };
    if (this.#size >= MAX_RECORDS) this.#trim();
    const k = keyOf(host, model);
    let b = this.#byKey.get(k);
    if (!b) this.#byKey.set(k, (b = { inflight: new Set(), ended: new Set() }));
    // The bucket stays while `f` is in flight in it (only empty buckets are dropped).
    const bucket = b;
    bucket.inflight.add(f);
    this.#size++;
    let ended = false;
    return (end) => {
      if (ended) return;
      ended = true;
      bucket.inflight.delete(f);
      if (end === 'refused') {
        // It never held a slot there: nothing to add back.
        this.#size--;
        this.#dropIfEmpty(k, bucket);
        return;
      }
      f.endedAt = this.now();
      bucket.ended.add(f);
      this.#count(bucket, f, 1);
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
    for (const [k, b] of this.#byKey) {
      for (const f of b.ended) {
        const p = polledAt(f.host);
        if ((p !== undefined && p > f.endedAt!) || now - f.endedAt! > ENDED_KEEP_MS) this.#forget(b, f);
      }
      this.#dropIfEmpty(k, b);
    }
  }

  /** This node's forwards to (host, model) for `target`, against a report polled at `polledAt` (`yourBusy`: eligibility.ts tallyOf). */
  readonly tally = (host: string, model: string, target: string, polledAt: number, yourBusy?: number): ForwardTally => {
    const b = this.#byKey.get(keyOf(host, model));
    if (!b) return { deducted: 0, freed: yourBusy ?? 0 };
    const inflight = tallyOf(b.inflight, target, polledAt, yourBusy);
    // The report's count replaces the ended forwards' (tallyOf).
    if (yourBusy !== undefined) return inflight;
    const { deducted } = inflight;
    if (b.freed?.polledAt !== polledAt) {
      // A newer report: count the ended forwards once for it; later ends and deletions keep the count.
      const byTarget = new Map<string, number>();
      for (const f of b.ended) if (freesSlotOf(f, polledAt)) byTarget.set(f.target, (byTarget.get(f.target) ?? 0) + 1);
      b.freed = { polledAt, byTarget };
    }
    return { deducted, freed: b.freed.byTarget.get(target) ?? 0 };
  };

  /** Has this node a forward in flight to `host` for `model`? */
  inFlight(host: string, model: string): boolean {
    return (this.#byKey.get(keyOf(host, model))?.inflight.size ?? 0) > 0;
  }

  get inFlightCount(): number {
    let n = 0;
    for (const b of this.#byKey.values()) n += b.inflight.size;
    return n;
  }

  get marks(): readonly RefusalMark[] {
    return this.#marks;
  }

  #dropIfEmpty(k: string, b: Bucket): void {
    if (b.inflight.size === 0 && b.ended.size === 0) this.#byKey.delete(k);
  }

  /** Keep the freed count of the poll time last asked about in step with the ended forwards. */
  #count(b: Bucket, f: ForwardRecord, delta: 1 | -1): void {
    if (!b.freed || !freesSlotOf(f, b.freed.polledAt)) return;
    b.freed.byTarget.set(f.target, (b.freed.byTarget.get(f.target) ?? 0) + delta);
  }

  #forget(b: Bucket, f: ForwardRecord): void {
    if (!b.ended.delete(f)) return;
    this.#count(b, f, -1);
    this.#size--;
  }

  #trim(): void {
    const ended: { b: Bucket; f: ForwardRecord }[] = [];
    for (const b of this.#byKey.values()) for (const f of b.ended) ended.push({ b, f });
    ended.sort((x, y) => x.f.endedAt! - y.f.endedAt!);
    for (const { b, f } of ended.slice(0, Math.ceil(ended.length / 2))) this.#forget(b, f);
    for (const [k, b] of this.#byKey) this.#dropIfEmpty(k, b);
  }
}
