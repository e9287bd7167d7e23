/**
 * The sticky reference arm's router: a conversation stays on its home engine
 * while that engine has a free slot by the client's own count, else the
 * engine with the fewest requests in flight takes it (ties: round robin).
 */
export class StickyRouter {
  readonly #load: InFlight;
  #home = new Map<number, number>();
  constructor(readonly slots: readonly number[]) {
    this.#load = new InFlight(slots);
  }

  get inFlight(): readonly number[] {
    return this.#load.inFlight;
  }

  /** The engine for a request of conversation `conv` (undefined: not a conversation); counts it in flight. */
  pick(conv: number | undefined): number {
    const home = conv === undefined ? undefined : this.#home.get(conv);
    const engine = this.#load.take(home);
    if (conv !== undefined && home === undefined) this.#home.set(conv, engine);
    return engine;
  }

  done(engine: number): void {
    this.#load.done(engine);
  }
}

/**
 * The client's own count of requests in flight per engine, which both sticky
 * arms route by: a home while it has a free slot, else the engine with the
 * fewest in flight (ties: round robin).
 */
export class InFlight {
  readonly inFlight: number[];
  #rr = 0;
  constructor(readonly slots: readonly number[]) {
    this.inFlight = slots.map(() => 0);
  }

  /** `home` if it has a free slot, else the least busy engine; counted in flight. */
  take(home: number | undefined): number {
    let engine: number;
    if (home !== undefined && this.inFlight[home] < this.slots[home]) engine = home;
    else {
      const least = Math.min(...this.inFlight);
      const tied = this.inFlight.flatMap((n, k) => (n === least ? [k] : []));
      engine = tied[this.#rr++ % tied.length];
    }
    this.inFlight[engine]++;
    return engine;
  }

  done(engine: number): void {
    this.inFlight[engine]--;
  }
}
