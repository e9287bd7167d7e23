/**
 * What an entry remembers of its own recent forwards, per (host, model):
 * a short list, oldest first, bounded by count and by age, that recent
 * routes (recent-routes.ts) and placed slots (placed-slots.ts) both keep.
 * A record can be forgotten (its forward was sent back: the host holds
 * nothing of it).
 */

export interface Dated {
  readonly at: number;
}

export class HostRecords<T extends Dated> {
  /** host \0 model → records, oldest first. */
  readonly #lists = new Map<string, T[]>();

  constructor(
    private readonly perHost: number,
    private readonly maxAgeMs: number,
  ) {}

  /** Keep `item` (dated now) for (host, model); the too old and the one too many leave. Returns its forgetter. */
  add(host: string, model: string, item: T, now: number): () => void {
    const key = `${host}\0${model}`;
    let list = this.#lists.get(key);
    if (!list) this.#lists.set(key, (list = []));
    // Oldest first: the old ones leave from the front, in place (this runs for every forward).
    let old = 0;
    while (old < list.length && now - list[old].at > this.maxAgeMs) old++;
    list.push(item);
    const over = Math.max(old, list.length - this.perHost);
    if (over > 0) list.splice(0, over);
    // Hosts never sent to again drop out once their records are all old.
    if (this.#lists.size > 4 * this.perHost) for (const [k, l] of this.#lists) if (l.every((r) => now - r.at > this.maxAgeMs)) this.#lists.delete(k);
    return () => {
      const kept = this.#lists.get(key);
      const i = kept ? kept.indexOf(item) : -1;
      if (i >= 0) kept!.splice(i, 1);
    };
  }

  /** The records for (host, model), oldest first. */
  of(host: string, model: string): readonly T[] {
    return this.#lists.get(`${host}\0${model}`) ?? [];
  }
}
