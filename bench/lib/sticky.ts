/**
 * The sticky reference arm's router: a conversation stays on its home engine
 * while that engine has a free slot by the client's own count, else the
 * engine with the fewest requests in flight takes it (ties: round robin).
 */
export class StickyRouter {
  readonly inFlight: number[];
  #home = new Map<number, number>();
  #rr = 0;
  constructor(readonly slots: readonly number[]) {
    this.inFlight = slots.map(() => 0);
  }

  /** The engine for a request of conversation `conv` (undefined: not a conversation); counts it in flight. */
  pick(conv: number | undefined): number {
    const home = conv === undefined ? undefined : this.#home.get(conv);
    let engine: number;
    if (home !== undefined && this.inFlight[home] < this.slots[home]) engine = home;
    else {
      const least = Math.min(...this.inFlight);
      const tied = this.inFlight.flatMap((n, k) => (n === least ? [k] : []));
      engine = tied[this.#rr++ % tied.length];
      if (conv !== undefined && home === undefined) this.#home.set(conv, engine);
    }
    this.inFlight[engine]++;
    return engine;
  }

  done(engine: number): void {
    this.inFlight[engine]--;
  }
}
