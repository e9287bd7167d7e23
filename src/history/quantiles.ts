/**
 * Quantiles of a step's values without keeping the values: counts in
 * logarithmic buckets (each 25% wider than the one before, from 1 ms), so a
 * request costs one increment and a p95 is within about 12% of the truth.
 */
const GROWTH = 1.25;
const LOG_GROWTH = Math.log(GROWTH);
export const BUCKETS = 72; // 1 ms … 1.25^72 ms (about 100 minutes): a TTFT or wait past that is the last bucket

export function bucketOf(ms: number): number {
  if (!(ms > 1)) return 0;
  return Math.min(BUCKETS - 1, Math.floor(Math.log(ms) / LOG_GROWTH) + 1);
}

/** The value a bucket stands for: the geometric middle of its bounds (bucket 0 is "up to 1 ms"). */
function valueOf(bucket: number): number {
  return bucket === 0 ? 1 : GROWTH ** (bucket - 0.5);
}

/** The q-quantile (0–1) of the counted values; undefined when none were counted. */
export function quantile(counts: Uint32Array, total: number, q: number): number | undefined {
  if (total === 0) return undefined;
  const rank = Math.max(1, Math.ceil(q * total));
  let seen = 0;
  for (let b = 0; b < counts.length; b++) {
    seen += counts[b];
    if (seen >= rank) return Math.round(valueOf(b) * 10) / 10;
  }
  return valueOf(counts.length - 1);
}
