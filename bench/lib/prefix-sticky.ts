import { InFlight } from './sticky.ts';

/**
 * The sticky reference arm for traces known only by their prefix (issue 42,
 * Mooncake): a request goes to the engine that last ran the longest prefix
 * of its block ids the client has sent before, while that engine has a free
 * slot by the client's own count; else to the engine with the fewest
 * requests in flight (ties: round robin). Every block of the request then
 * points at the engine it went to, so new prefixes make homes and a turn
 * that overflowed moves its conversation's home with it (that engine now
 * holds the longest prefix). Blocks every request shares (`skip`, the
 * system prompt) say nothing about where a conversation lives and are not
 * matched.
 */
export class PrefixStickyRouter {
  readonly #load: InFlight;
  #where = new Map<number, number>();
  constructor(
    readonly slots: readonly number[],
    readonly skip = 0,
  ) {
    this.#load = new InFlight(slots);
  }

  get inFlight(): readonly number[] {
    return this.#load.inFlight;
  }

  /** The engine that last ran the longest known prefix of `blocks` (ids are chained: the deepest known id is that prefix). */
  home(blocks: readonly number[]): number | undefined {
    for (let k = blocks.length - 1; k >= this.skip; k--) {
      const e = this.#where.get(blocks[k]);
      if (e !== undefined) return e;
    }
    return undefined;
  }

  /** The engine for a request of these blocks; counts it in flight. */
  pick(blocks: readonly number[]): number {
    const engine = this.#load.take(this.home(blocks));
    for (let k = this.skip; k < blocks.length; k++) this.#where.set(blocks[k], engine);
    return engine;
  }

  done(engine: number): void {
    this.#load.done(engine);
  }
}
