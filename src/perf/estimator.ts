/**
 * The score model (SPEC section 9): from samples of (prompt tokens, time
 * from slot grant to first content chunk), estimate a fixed overhead and a
 * prefill rate per 1k prompt tokens. Pure: samples and clock come in.
 *
 * Short prompts (< 512 tokens) estimate the overhead, long ones the rate;
 * each is corrected by the other's current estimate, a few rounds, so a
 * short prompt's small prefill does not inflate the overhead and the
 * overhead does not inflate the rate.
 */

export const SHORT_PROMPT_TOKENS = 512;
export const SAMPLE_WINDOW_MS = 10 * 60_000;
export const BASELINE_WEIGHT_K = 5;

export interface Sample {
  /** Clock ms when measured. */
  at: number;
  promptTokens: number;
  ttftMs: number;
}

export interface Estimate {
  ttft_overhead_ms?: number;
  prefill_ms_per_1k?: number;
  /** Samples behind each part. */
  nOverhead: number;
  nRate: number;
}

export interface Baseline {
  ttft_overhead_ms?: number;
  prefill_ms_per_1k?: number;
}

export interface Published {
  ttft_overhead_ms?: number;
  prefill_ms_per_1k?: number;
  perf_samples: number;
}

export function median(xs: readonly number[]): number | undefined {
  if (xs.length === 0) return undefined;
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
}

/** Round to two significant digits: 143 → 140, 95.3 → 95, 0.1234 → 0.12. */
export function twoSignificant(x: number): number {
  if (x === 0 || !Number.isFinite(x)) return x;
  const p = Math.floor(Math.log10(Math.abs(x))) - 1;
  const f = 10 ** p;
  return Number((Math.round(x / f) * f).toPrecision(2));
}

export function estimate(samples: readonly Sample[], now: number): Estimate {
  const recent = samples.filter((s) => now - s.at <= SAMPLE_WINDOW_MS);
  const short = recent.filter((s) => s.promptTokens < SHORT_PROMPT_TOKENS);
  const long = recent.filter((s) => s.promptTokens >= SHORT_PROMPT_TOKENS);
  let overhead: number | undefined;
  let rate: number | undefined;
  for (let round = 0; round < 6; round++) {
    const r = rate ?? 0;
    const nextOverhead = median(short.map((s) => s.ttftMs - (r * s.promptTokens) / 1000));
    const o = nextOverhead ?? 0;
    const nextRate = median(long.map((s) => ((s.ttftMs - o) * 1000) / s.promptTokens));
    // A round that changed neither (always so when one side has no samples) leaves every later round the same.
    const settled = round > 0 && Object.is(nextOverhead, overhead) && Object.is(nextRate, rate);
    overhead = nextOverhead;
    rate = nextRate;
    if (settled) break;
  }
  return {
    ttft_overhead_ms: overhead === undefined ? undefined : Math.max(0, overhead),
    prefill_ms_per_1k: rate === undefined ? undefined : Math.max(0, rate),
    nOverhead: short.length,
    nRate: long.length,
  };
}

/** measured × n/(n+5) + baseline × 5/(n+5); either side alone when the other is missing. */
export function blend(measured: number | undefined, n: number, baseline: number | undefined): number | undefined {
  if (measured === undefined) return baseline;
  if (baseline === undefined) return measured;
  const w = n / (n + BASELINE_WEIGHT_K);
  return measured * w + baseline * (1 - w);
}

export function publish(e: Estimate, baseline: Baseline): Published {
  const o = blend(e.ttft_overhead_ms, e.nOverhead, baseline.ttft_overhead_ms);
  const r = blend(e.prefill_ms_per_1k, e.nRate, baseline.prefill_ms_per_1k);
  return {
    ttft_overhead_ms: o === undefined ? undefined : twoSignificant(o),
    prefill_ms_per_1k: r === undefined ? undefined : twoSignificant(r),
    perf_samples: e.nOverhead + e.nRate,
  };
}
