/**
 * What each host already holds of this request's prompt (SPEC section 9,
 * step 6, "cached"), and what starts there before it: the inputs pricing
 * needs beyond the candidates' slots. Pure: the node's own record of its
 * recent routes comes in through `RouteMemory`.
 */
import { heldTokens, type PrefixChain } from '../prompt/held.ts';
import { eligibleTargets } from './eligibility.ts';
import type { Candidate, HostView } from './types.ts';

/** This node's record of what it routed where (dispatch/entry/recent-routes.ts). */
export interface RouteMemory {
  /**
   * Tokens of `chain` held by the prompts this node routed to `host` for
   * `model` at or after `since`, looking at the `slots` most recent of them
   * (a slot holds one prompt; older ones are gone from its cache).
   */
  held(host: string, model: string, chain: PrefixChain, since: number, slots: number): number;
}

export interface WarmthInputs {
  hosts: readonly HostView[];
  model: string;
  workload: string;
  chain: PrefixChain;
  memory: RouteMemory;
  /** Requests this node holds in its queue for a host (waiting for its warm slot), this one excluded. */
  holding?: (host: string) => number;
}

/**
 * The candidates with `cached` and `ahead` filled in. cached = the larger of
 * the deepest link found in the digests of the host's eligible targets and
 * the deepest found in this node's own record of what it routed there since
 * that digest was polled (a request just sent counts at once, so a burst of
 * related requests does not scatter). This node's own record is exact and
 * never pruned by a poll: this node's digest is of now.
 */
export function warmCandidates(cands: readonly Candidate[], w: WarmthInputs): Candidate[] {
  if (w.chain.length === 0 && !w.holding) return [...cands];
  const byName = new Map(w.hosts.map((h) => [h.name, h]));
  return cands.map((c) => {
    const h = byName.get(c.host);
    const m = h?.models.get(w.model);
    let fromDigest = 0;
    let digested = false;
    let slots = 0;
    if (m) {
      for (const t of eligibleTargets(m, w.workload)) {
        slots += t.slots;
        if (!t.digest) continue;
        digested = true;
        // With a free slot the engine places the request there: what only busy slots hold does not count.
        fromDigest = Math.max(fromDigest, heldTokens(w.chain, t.digest.held, c.free > 0 ? t.digest.busy : undefined));
      }
    }
    const since = !c.local && digested && h ? h.polledAt : -Infinity;
    const own = w.chain.length === 0 ? 0 : w.memory.held(c.host, w.model, w.chain, since, Math.max(1, slots));
    const ahead = (c.ahead ?? 0) + (w.holding?.(c.host) ?? 0);
    return { ...c, cached: Math.max(fromDigest, own), ...(ahead > 0 ? { ahead } : {}) };
  });
}
