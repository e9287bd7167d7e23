/**
 * Predictions (SPEC section 9, step 6): a host's expected time to first
 * token for this prompt, with missing parts filled by the median over the
 * hosts that have them.
 */
import { median } from '../perf/estimator.ts';
import type { Candidate } from './types.ts';

export const BAND = 1.25;
export const EXPLORE_PROBABILITY = 1 / 20;
/** The prompt size that defines a host's speed class. */
export const SPEED_CLASS_TOKENS = 1000;

export function isScored(c: Candidate): boolean {
  return c.overheadMs !== undefined || c.ratePer1k !== undefined;
}

export interface Priced {
  c: Candidate;
  /** Prediction for this prompt, RTT included. */
  prediction: number;
  /** Prediction for a 1,000-token prompt, without RTT. */
  speedClass: number;
}

/** Price every candidate; undefined when no candidate has any score. */
export function price(cands: readonly Candidate[], promptTokens: number): Priced[] | undefined {
  const scored = cands.filter(isScored);
  if (scored.length === 0) return undefined;
  const medOverhead = median(scored.flatMap((c) => (c.overheadMs === undefined ? [] : [c.overheadMs]))) ?? 0;
  const medRate = median(scored.flatMap((c) => (c.ratePer1k === undefined ? [] : [c.ratePer1k]))) ?? 0;
  const parts = (c: Candidate) => ({ o: c.overheadMs ?? medOverhead, r: c.ratePer1k ?? medRate });
  const predict = (c: Candidate, tokens: number, rtt: boolean) => {
    const { o, r } = parts(c);
    return o + (r * tokens) / 1000 + (rtt ? c.rttMs : 0);
  };
  const medPrediction = median(scored.map((c) => predict(c, promptTokens, true)))!;
  const medSpeed = median(scored.map((c) => predict(c, SPEED_CLASS_TOKENS, false)))!;
  return cands.map((c) =>
    isScored(c)
      ? { c, prediction: predict(c, promptTokens, true), speedClass: predict(c, SPEED_CLASS_TOKENS, false) }
      : { c, prediction: medPrediction, speedClass: medSpeed },
  );
}
