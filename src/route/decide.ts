/**
 * The routing decision (SPEC section 9, steps 5–7) as one pure function:
 * candidates in, a host (with the reason) or "wait" out.
 */
import { isScoredWorkload } from '../workloads/workloads.ts';
import { rendezvousRank } from './rendezvous.ts';
import { BAND, EXPLORE_PROBABILITY, isScored, price, type Priced } from './score.ts';
import type { Candidate, Decision, RouteOptions, RouteReason, RouteRequest } from './types.ts';


const run = (c: Candidate, reason: RouteReason): Decision => ({ kind: 'run', host: c.host, local: c.local, reason, target: c.bestTarget });

/**
 * Decide where a request runs now, or that it must wait. `cands` are the
 * eligible hosts (see eligibility.ts); only fresh ones are routed to.
 */
export function decide(cands: readonly Candidate[], req: RouteRequest, opts: RouteOptions): Decision {
  const live = cands.filter((c) => c.fresh || c.local);
  if (req.pin !== undefined) {
    const c = live.find((x) => x.host === req.pin);
    return c && c.free > 0 ? run(c, 'pinned') : { kind: 'wait' };
  }
  const free = live.filter((c) => c.free > 0);
  if (free.length === 0) return { kind: 'wait' };
  for (const name of req.prefer) {
    const c = free.find((x) => x.host === name);
    if (c) return run(c, 'preferred');
  }
  const steered = req.prefer.length > 0;
  const priced = opts.performance && isScoredWorkload(req.workload) ? price(live, req.promptTokens ?? 0) : undefined;

  if (req.sessionKey !== undefined) return session(live, priced, req.sessionKey, 'session');
  if (req.prefixKey !== undefined) return session(live, priced, req.prefixKey, 'prefix');
  if (!priced) return mostFree(free, opts.roundRobin);

  const freePriced = priced.filter((p) => p.c.free > 0);
  const best = Math.min(...freePriced.map((p) => p.prediction));
  const band = freePriced.filter((p) => p.prediction <= BAND * best);
  const local = band.find((p) => p.c.local);
  if (local) return run(local.c, 'local');
  const unscored = free.filter((c) => !isScored(c));
  if (!steered && unscored.length > 0) {
    if (opts.random() < EXPLORE_PROBABILITY) {
      const i = Math.min(unscored.length - 1, Math.floor(opts.random() * unscored.length));
      return run(unscored[i], 'explore');
    }
  }
  return run(weightedDraw(band, opts.random()).c, 'scored');
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

/**
 * A session goes to the first host of its rendezvous ranking (over every
 * eligible fresh host, so the ranking is the same from every entry node)
 * that has a free slot and, when scores exist, a speed class within 1.25× of
 * the best free one.
 */
function session(live: readonly Candidate[], priced: Priced[] | undefined, key: string, reason: 'session' | 'prefix'): Decision {
  const ranking = rendezvousRank(key, live.map((c) => c.host));
  const byHost = new Map(live.map((c) => [c.host, c]));
  let limit = Infinity;
  const speed = new Map<string, number>();
  if (priced) {
    for (const p of priced) speed.set(p.c.host, p.speedClass);
    limit = BAND * Math.min(...priced.filter((p) => p.c.free > 0).map((p) => p.speedClass));
  }
  for (const host of ranking) {
    const c = byHost.get(host)!;
    if (c.free > 0 && (speed.get(host) ?? 0) <= limit) return run(c, reason);
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
