/**
 * The routing benchmark's "sticky" reference router (issue 17): the
 * simplest cache rule. A client-side router that keeps each conversation on
 * the engine that served its previous turn while that engine has a free
 * slot (by its own count of what it sent there), and otherwise — and for
 * everything that is not a later turn — sends to the engine with the fewest
 * requests in flight relative to its slots (least connections, ties in turn).
 */
export class Sticky {
  readonly inflight: number[];
  readonly #home = new Map<number, number>();
  #rr = 0;

  constructor(readonly slots: readonly number[]) {
    this.inflight = slots.map(() => 0);
  }

  /** The engine for a request of conversation `conv` (undefined: not part of one); counts it in flight there. */
  pick(conv: number | undefined): number {
    const home = conv === undefined ? undefined : this.#home.get(conv);
    const k = home !== undefined && this.inflight[home] < this.slots[home] ? home : this.#leastConn();
    this.inflight[k]++;
    if (conv !== undefined) this.#home.set(conv, k);
    return k;
  }

  /** The request sent to engine `k` has ended. */
  done(k: number): void {
    this.inflight[k] = Math.max(0, this.inflight[k] - 1);
  }

  #leastConn(): number {
    const load = this.inflight.map((n, k) => n / this.slots[k]);
    const least = Math.min(...load);
    const tied = load.flatMap((l, k) => (l === least ? [k] : []));
    return tied[this.#rr++ % tied.length];
  }
}
