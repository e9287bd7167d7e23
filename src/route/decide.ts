/**
 * The routing decision (SPEC section 9, steps 5–7) as one pure function:
 * candidates in, a host (with the reason), or "wait" (for a named full host,
 * for at most so long, or for any slot) out.
 */
import { isScoredWorkload } from '../workloads/workloads.ts';
import { rendezvousRank } from '../hashing/rendezvous.ts';
import { BAND, EXPLORE_PROBABILITY, isScored, price, servicePrice, WAIT_WEIGHT, type Priced } from './price.ts';
import { evictionMs } from './slots.ts';
import { homeRanking, placeSession } from './session-home.ts';
import type { Candidate, Decision, RouteOptions, RouteReason, RouteRequest } from './types.ts';

/** No host left out (the usual case): one empty set, not one per decision. */
const NO_HOSTS: ReadonlySet<string> = new Set();

const run = (c: Candidate, reason: RouteReason, predictedCached?: number): Decision => ({
  kind: 'run',
  host: c.host,
  local: c.local,
  reason,
  target: c.bestTarget,
  ...(predictedCached !== undefined ? { predictedCached } : c.cached !== undefined ? { predictedCached: c.cached } : {}),
  ...(c.slot !== undefined ? { slot: c.slot } : {}),
  ...(c.evicted !== undefined ? { evicted: c.evicted } : {}),
});

/**
 * Decide where a request runs now, or that it must wait. `cands` are the
 * eligible hosts (see eligibility.ts), with what they hold of this prompt
 * (warmth.ts); only fresh ones are routed to.
 */
export function decide(cands: readonly Candidate[], req: RouteRequest, opts: RouteOptions): Decision {
  const live = cands.filter((c) => c.fresh || c.local);
  if (req.pin !== undefined) {
    const c = live.find((x) => x.host === req.pin);
    return c && c.free > 0 ? run(c, 'pinned') : { kind: 'wait' };
  }
  const free = live.filter((c) => c.free > 0);
  for (const name of req.prefer) {
    const c = free.find((x) => x.host === name);
    if (c) return run(c, 'preferred');
  }
  const steered = req.prefer.length > 0;
  const scoredWork = opts.performance && isScoredWorkload(req.workload);
  // The common case (one node, or an entry with one executor): one live host, free. Pricing it alone decides nothing.
  if (scoredWork && live.length === 1 && req.sessionKey === undefined) {
    const d = alone(live[0], req.pricedTokens ?? req.promptTokens ?? 0);
    if (d) return d;
  }
  const priced = scoredWork ? price(live, req.pricedTokens ?? req.promptTokens ?? 0) : undefined;
  if (!priced) {
    if (free.length === 0) return { kind: 'wait' };
    // Step 7: a session still runs on its home (the weighted ranking), a prefix on its ranking, among hosts with a free slot.
    if (req.sessionKey !== undefined) return ranked(free, homeRanking(req.sessionKey, live), 'session');
    if (req.prefixKey !== undefined) return ranked(free, rendezvousRank(req.prefixKey, live.map((c) => c.host)), 'prefix');
    return mostFree(free, opts.roundRobin);
  }

  // The feed compares the prediction with the engine's own count: the tokens believed held (in the engine's tokens where
  // the digest has them), not capped at the priced tokens (bytes ÷ 4 may undercount a real tokenizer).
  const pick = (p: Priced, reason: RouteReason) => run(p.c, reason, p.c.cached ?? p.cached);
  const noWait: ReadonlySet<string> = req.noWait?.length ? new Set(req.noWait) : NO_HOSTS;
  if (req.sessionKey !== undefined) {
    // A session's home decides before any tie band (SPEC 9.6, "Session home"), the same way on every entry node.
    const home = placeSession(priced, homeRanking(req.sessionKey, live), noWait);
    if (home?.kind === 'run') return pick(home.p, 'session');
    if (home?.kind === 'wait') return home.holdMs === undefined ? { kind: 'wait', host: home.host } : { kind: 'wait', host: home.host, holdMs: home.holdMs };
  }

  const freePriced = priced.filter((p) => p.c.free > 0);
  const bestFree = freePriced.length ? Math.min(...freePriced.map((p) => p.score)) : Infinity;
  // A full warm host that beats every free one by more than the tie band, even after its (weighted) wait: wait for it.
  // Judged on this request's own time to first token: a free host's eviction (the re-prefill it may cost another
  // conversation later) chooses among free hosts, never makes a request wait while a slot is free. A full host's
  // slot that frees holds the prompt that just ran there, so waiting evicts too; priced as if it evicted nothing,
  // waiting won whenever the free slots held live conversations (issue 42: on Mooncake's trace the entries held
  // requests 0.5-0.9 s on average in their queues while slots stood free, and lost to least_conn).
  const bestFreeOwn = freePriced.length ? Math.min(...freePriced.map((p) => p.score - p.evictMs)) : Infinity;
  const full = priced.filter((p) => p.c.free === 0 && p.c.healthy && !noWait.has(p.c.host));
  const bestFull = lowest(full, req);
  if (bestFull && bestFull.score * BAND < bestFreeOwn) {
    // It pays while the wait so far, weighed, stays under what it saves over the best free host.
    if (bestFreeOwn === Infinity) return { kind: 'wait', host: bestFull.c.host };
    return { kind: 'wait', host: bestFull.c.host, holdMs: Math.max(0, (bestFreeOwn - bestFull.service) / WAIT_WEIGHT) };
  }
  if (freePriced.length === 0) return { kind: 'wait' };

  if (req.sessionKey === undefined && !steered) {
    const unscored = free.filter((c) => !isScored(c));
    if (unscored.length > 0 && opts.random() < EXPLORE_PROBABILITY) {
      const i = Math.min(unscored.length - 1, Math.floor(opts.random() * unscored.length));
      return run(unscored[i], 'explore');
    }
  }

  const band = freePriced.filter((p) => p.score <= BAND * bestFree);
  if (band.length === 1) return pick(band[0], band[0].c.local ? 'local' : 'scored');
  // Ties: this node, the prefix key's ranking, then a draw (a session decided above, or has no host to say).
  const local = band.find((p) => p.c.local);
  if (local) return pick(local, 'local');
  if (req.prefixKey !== undefined) return pick(firstRanked(band, live, req.prefixKey), 'prefix');
  return pick(weightedDraw(band, opts.random()), 'scored');
}

/**
 * One live host with a free slot and a score: what the priced path below
 * decides for it (its own band, no full host to wait for, nothing unscored
 * to explore), without building the prices. Undefined when that path could
 * decide otherwise (no score, or a score the band cannot hold).
 */
function alone(c: Candidate, tokens: number): Decision | undefined {
  if (c.free <= 0 || !isScored(c)) return undefined;
  const score = servicePrice(c, tokens, c.overheadMs ?? 0, c.ratePer1k ?? 0) + evictionMs(c.evicted, c.ratePer1k ?? 0);
  if (!(score >= 0) || tokens < 0) return undefined;
  return run(c, c.local ? 'local' : 'scored', c.cached ?? 0);
}

/**
 * The lowest score; its ties (within the band) broken as free hosts' are
 * but without a draw, so every entry node waits for the same host.
 */
function lowest(ps: readonly Priced[], req: RouteRequest): Priced | undefined {
  if (ps.length === 0) return undefined;
  const best = Math.min(...ps.map((p) => p.score));
  const band = ps.filter((p) => p.score <= BAND * best);
  if (band.length === 1) return band[0];
  const key = req.sessionKey ?? req.prefixKey;
  if (key !== undefined) return firstRanked(band, band.map((p) => p.c), key);
  return band.reduce((a, b) => (b.score < a.score || (b.score === a.score && b.c.host < a.c.host) ? b : a));
}

/** The band's member that comes first in the key's rendezvous ranking over every live host (the same on every entry node). */
function firstRanked(band: readonly Priced[], live: readonly Candidate[], key: string): Priced {
  const byHost = new Map(band.map((p) => [p.c.host, p]));
  for (const host of rendezvousRank(key, live.map((c) => c.host))) {
    const p = byHost.get(host);
    if (p) return p;
  }
  return band[0];
}

/** A draw over the band weighted by 1/prediction³ (a prediction of 0 wins outright). */
export function weightedDraw(band: readonly Priced[], u: number): Priced {
  const zero = band.find((p) => p.prediction <= 0);
  if (zero) return zero;
  const weights = band.map((p) => 1 / p.prediction ** 3);
  const total = weights.reduce((a, b) => a + b, 0);
  let x = u * total;
  for (let i = 0; i < band.length; i++) {
    x -= weights[i];
    if (x < 0) return band[i];
  }
  return band[band.length - 1];
}

/** Without prices: the first host of the key's ranking (over every live host) that has a free slot. */
function ranked(free: readonly Candidate[], ranking: readonly string[], reason: 'session' | 'prefix'): Decision {
  const byHost = new Map(free.map((c) => [c.host, c]));
  for (const host of ranking) {
    const c = byHost.get(host);
    if (c) return run(c, reason);
  }
  return { kind: 'wait' };
}

/** No scores: a free local target, else the host with the most free slots (ties: lower RTT, then round robin). */
function mostFree(free: readonly Candidate[], rr: number): Decision {
  const local = free.find((c) => c.local);
  if (local) return run(local, 'local');
  const most = Math.max(...free.map((c) => c.free));
  const top = free.filter((c) => c.free === most);
  const rtt = Math.min(...top.map((c) => c.rttMs));
  const tied = top.filter((c) => c.rttMs === rtt);
  return run(tied[rr % tied.length], 'most-free');
}
