/**
 * Who is served next when nothing is free (SPEC section 12): strict
 * priority bands (`interactive` before `batch`), and inside a band the key
 * with the least weighted service, by a virtual token counter per key (VTC,
 * Sheng et al., OSDI 2024); inside one key, first come first served.
 *
 * A key's counter grows by what it is served: uncached prompt tokens plus
 * twice its output tokens, divided by its weight. A key that starts waiting
 * again is lifted to the lowest counter among the keys already waiting in
 * its band, so idling earns no credit to flood with later. Pure functions
 * over plain values; the queue (fifo.ts) holds the state.
 *
 * Without keys every request is one anonymous interactive flow: the order
 * is then exactly the arrival order, as before keys.
 */

export type Band = 'interactive' | 'batch';
/** Highest first. */
export const BANDS: readonly Band[] = ['interactive', 'batch'];

/** A waiting request's flow: whose it is, its band, its key's weight, and what it is expected to cost when served. */
export interface Flow {
  key: string;
  band: Band;
  weight: number;
  /** Service units this request is charged when placed: see `serviceCost`. */
  cost: number;
}

export const ANONYMOUS_FLOW: Flow = { key: 'anonymous', band: 'interactive', weight: 1, cost: 0 };

/** VTC's service of one request: uncached prompt tokens + 2 × output tokens (output costs more to serve). */
export function serviceCost(uncachedPromptTokens: number, outputTokens: number): number {
  return Math.max(0, uncachedPromptTokens) + 2 * Math.max(0, outputTokens);
}

/** What a served request adds to its key's counter. */
export const charge = (flow: Pick<Flow, 'cost' | 'weight'>, cost = flow.cost): number => cost / flow.weight;

/**
 * The order to try waiters in (indices into `waiters`, which are in arrival
 * order): band first, then the key's counter (lowest first; a tie goes to
 * the key whose oldest waiter came first), then arrival.
 */
export function serviceOrder(waiters: readonly Pick<Flow, 'key' | 'band'>[], counters: ReadonlyMap<string, number>): number[] {
  const firstSeen = new Map<string, number>();
  waiters.forEach((w, i) => {
    if (!firstSeen.has(w.key)) firstSeen.set(w.key, i);
  });
  const rank = (b: Band) => BANDS.indexOf(b);
  return waiters
    .map((_, i) => i)
    .sort((i, j) => {
      const a = waiters[i];
      const b = waiters[j];
      return rank(a.band) - rank(b.band) || (counters.get(a.key) ?? 0) - (counters.get(b.key) ?? 0) || firstSeen.get(a.key)! - firstSeen.get(b.key)! || i - j;
    });
}

/**
 * A key's counter as it starts waiting (none of its requests waiting yet):
 * lifted to the lowest counter among the keys already waiting in its band,
 * never lowered. With none waiting it keeps its own.
 */
export function liftedCounter(own: number | undefined, key: string, band: Band, waiting: readonly Pick<Flow, 'key' | 'band'>[], counters: ReadonlyMap<string, number>): number {
  let low = Infinity;
  for (const w of waiting) if (w.band === band && w.key !== key) low = Math.min(low, counters.get(w.key) ?? 0);
  return Math.max(own ?? 0, low === Infinity ? (own ?? 0) : low);
}
