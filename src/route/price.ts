/**
 * Pricing (SPEC section 9, step 6): every eligible fresh host's expected
 * time to first token for this prompt, free or full. With prompt caches a
 * host's time is mostly the prefill of the tokens it does not hold, plus the
 * wait for a slot:
 *
 *   prediction = wait + ttft_overhead_ms + prefill_ms_per_1k × (tokens − cached) ÷ 1000 + RTT + eviction
 *
 * where eviction is the expected re-prefill of the prompt the request's slot
 * would destroy there (slots.ts).
 *
 * A missing part is filled with the median of that part over the hosts that
 * have it; a host with no score at all is priced at the median service time
 * (plus its own wait). Hosts are ranked by `score`, in which the wait counts
 * WAIT_WEIGHT times: a wrong wait queues others behind it, and a slot's
 * release time is a guess, where prefill is measured.
 */
import { median } from '../perf/estimator.ts';
import { evictionMs, RESTORE_SHARE } from './slots.ts';
import type { Candidate } from './types.ts';

/** Predictions within this factor of the lowest are ties (SPEC: 10%). */
export const BAND = 1.1;
/**
 * How much heavier a ms of waiting for a full host weighs than a ms of
 * prefill when hosts are ranked (docs/decisions.md, "Pricing"): the routing
 * benchmark's oracle's weight (a queued request also delays those behind
 * it), so a full warm host is waited for only when it saves at least three
 * times the expected wait.
 */
export const WAIT_WEIGHT = 3;
export const EXPLORE_PROBABILITY = 1 / 20;

export function isScored(c: Candidate): boolean {
  return c.overheadMs !== undefined || c.ratePer1k !== undefined;
}

export interface Priced {
  c: Candidate;
  /** Expected ms to first token: wait + service. */
  prediction: number;
  /** Overhead + prefill of the uncached tokens + RTT + what its slot would evict (free hosts). */
  service: number;
  /** Of service: the expected re-prefill of what this placement destroys there (SPEC 9.6, "Eviction"). */
  evictMs: number;
  /** Expected ms until a slot is there for this request: 0 with one free. */
  wait: number;
  /** The ranking: service + WAIT_WEIGHT × wait. */
  score: number;
  /** Tokens priced as held there. */
  cached: number;
}

/**
 * Price every candidate for a prompt of `tokens`; undefined when no
 * candidate has any score (then step 7 routes without prices).
 *
 * wait (a full host): its reported `release_ms` (else the median over hosts
 * that report one, else its own service time for this prompt, a request's
 * time being the best guess of a slot's) times one plus the requests this
 * node already sent or holds for it (`ahead`): each of those takes the slot
 * that frees before this one can.
 */
export function price(cands: readonly Candidate[], tokens: number): Priced[] | undefined {
  const scored = cands.filter(isScored);
  if (scored.length === 0) return undefined;
  const medOverhead = median(scored.flatMap((c) => (c.overheadMs === undefined ? [] : [c.overheadMs]))) ?? 0;
  const medRate = median(scored.flatMap((c) => (c.ratePer1k === undefined ? [] : [c.ratePer1k]))) ?? 0;
  const medRelease = median(cands.flatMap((c) => (c.free === 0 && c.releaseMs !== undefined ? [c.releaseMs] : [])));
  const services: number[] = [];
  for (const c of scored) services.push(servicePrice(c, tokens, medOverhead, medRate));
  const medService = median(services)!;
  const out: Priced[] = [];
  for (const c of cands) {
    // A free slot still holds its last conversation: taking it costs that conversation's re-prefill, at this host's
    // rate, as likely as it is to return. A full host's slot is whichever frees first: unknown, not priced.
    const evictMs = c.free > 0 ? evictionMs(c.evicted, c.ratePer1k ?? medRate) : 0;
    const s = (isScored(c) ? servicePrice(c, tokens, medOverhead, medRate) : medService) + evictMs;
    const wait = c.free > 0 ? 0 : (c.releaseMs ?? medRelease ?? s) * (1 + (c.ahead ?? 0));
    out.push({ c, prediction: s + wait, service: s, evictMs, wait, score: s + WAIT_WEIGHT * wait, cached: Math.min(c.cached ?? 0, tokens) });
  }
  return out;
}

/** A host's service time for a prompt of `tokens`: overhead, the prefill of what it lacks, RTT (a missing part priced at the medians given). */
export function servicePrice(c: Candidate, tokens: number, medOverhead: number, medRate: number): number {
  const uncached = Math.max(0, tokens - Math.min(c.cached ?? 0, tokens));
  // A prefix held in RAM counts as cached plus its restore (route/slots.ts RESTORE_SHARE of its prefill).
  const restore = Math.min(c.restored ?? 0, tokens) * RESTORE_SHARE;
  return (c.overheadMs ?? medOverhead) + ((c.ratePer1k ?? medRate) * (uncached + restore)) / 1000 + c.rttMs;
}
