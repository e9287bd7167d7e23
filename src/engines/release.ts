/**
 * `release_ms` (SPEC section 7): when a target has no free slot, how long
 * until its next slot frees, from its running requests' elapsed times and
 * its recent mean slot-busy time. Pure: times in, estimate out.
 */

/** A request running longer than the mean is expected to end within this share of the mean (it is overdue, not endless). */
export const OVERDUE_SHARE = 0.25;
/** Weight of the newest lease in the mean slot-busy time. */
export const BUSY_ALPHA = 0.2;

/**
 * The expected milliseconds until the first of the running requests ends:
 * for each, the mean busy time less its elapsed time, or OVERDUE_SHARE of
 * the mean once it has run longer than the mean; undefined with no mean yet
 * or nothing running.
 */
export function releaseEstimate(elapsedMs: readonly number[], meanBusyMs: number | undefined): number | undefined {
  if (meanBusyMs === undefined || !(meanBusyMs > 0) || elapsedMs.length === 0) return undefined;
  let best = Infinity;
  for (const e of elapsedMs) best = Math.min(best, e < meanBusyMs ? meanBusyMs - e : meanBusyMs * OVERDUE_SHARE);
  return Math.round(best);
}

/** The mean slot-busy time after one more lease of `ms`. */
export function nextMeanBusy(mean: number | undefined, ms: number): number {
  return mean === undefined ? ms : mean + BUSY_ALPHA * (ms - mean);
}
