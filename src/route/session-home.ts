/**
 * A session's home (SPEC section 9, step 6, "Session home"): the first host
 * of the session key's rendezvous ranking over every eligible fresh host,
 * weighted by each host's slots for the model, so every entry node names the
 * same home and homes spread in proportion to cache room. A turn runs at
 * home while the home has a free slot and its price is within the seed's
 * band of the best free host's; a full, warm home is waited for by the wait
 * rule; only then does the turn move, to the next host of its ranking that
 * is within the band, which again every entry node names alike.
 *
 * Pure: priced candidates in, a choice out.
 */
import { weightedRendezvousRank } from '../hashing/rendezvous.ts';
import { BAND, isScored, WAIT_WEIGHT, type Priced } from './price.ts';
import type { Candidate } from './types.ts';

/** The seed's band: a session stays on a host priced within this factor of the best free one. */
export const SESSION_BAND = 1.25;

/** The key's ranking over `hosts`, weighted by their slots (a host whose slots are not counted weighs one). */
export function homeRanking(key: string, hosts: readonly Candidate[]): string[] {
  return weightedRendezvousRank(
    key,
    hosts.filter((c) => c.healthy).map((c) => ({ name: c.host, weight: c.slots ?? 1 })),
  );
}

export type HomeChoice =
  | { kind: 'run'; p: Priced }
  /** The home is full and its warm slot beats every free host even after the wait: wait for it (holdMs: at most so long). */
  | { kind: 'wait'; host: string; holdMs?: number };

/**
 * Where the session's turn goes among `priced` hosts, ranked by `ranking`;
 * undefined when the session decides nothing (no host of its ranking is
 * priced, or nothing is free and its home is not worth waiting for).
 * `noWait`: hosts already waited for as long as they paid.
 */
export function placeSession(priced: readonly Priced[], ranking: readonly string[], noWait: ReadonlySet<string>): HomeChoice | undefined {
  const byHost = new Map(priced.map((p) => [p.c.host, p]));
  const free = priced.filter((p) => p.c.free > 0);
  // The band compares prices without the hop from this entry node: with fast engines the hop alone is more than the
  // band, and each entry would keep the turn on its own host (issue 42: `rb, rb, rc, rb, …`). Every entry sees the
  // same scores less their hops, so every entry decides alike.
  const bestFreeHere = free.length ? Math.min(...free.map(hopless)) : Infinity;
  const inBand = (p: Priced) => p.c.free > 0 && hopless(p) <= SESSION_BAND * bestFreeHere;
  const home = ranking.map((h) => byHost.get(h)).find((p) => p !== undefined);
  if (!home) return undefined;
  if (inBand(home)) return { kind: 'run', p: home };
  // Whether a full warm home is worth waiting for is judged without the hop too: with it, the entry beside the home
  // waited while the others moved the turn (issue 42).
  if (home.c.free === 0 && (home.c.cached ?? 0) > 0 && !noWait.has(home.c.host) && hopless(home) * BAND < bestFreeHere) {
    if (bestFreeHere === Infinity) return { kind: 'wait', host: home.c.host };
    return { kind: 'wait', host: home.c.host, holdMs: Math.max(0, (bestFreeHere - (home.service - hopOf(home))) / WAIT_WEIGHT) };
  }
  for (const h of ranking) {
    const p = byHost.get(h);
    if (p && inBand(p)) return { kind: 'run', p };
  }
  return undefined;
}

/** The hop to a host from this node that its service price holds (none for a host priced at the median). */
function hopOf(p: Priced): number {
  return isScored(p.c) ? p.c.rttMs : 0;
}

/** A host's score less the hop to it from this node. */
function hopless(p: Priced): number {
  return p.score - hopOf(p);
}
