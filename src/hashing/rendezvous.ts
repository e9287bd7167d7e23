/**
 * Rendezvous (highest-random-weight) hashing: every node ranks the same
 * candidates the same way for a key, with no shared state, and removing one
 * candidate moves only the keys that were on it.
 */
import crypto from 'node:crypto';

export function rendezvousWeight(key: string, name: string): bigint {
  return crypto.hash('sha256', `${key}\0${name}`, 'buffer').readBigUInt64BE(0);
}

/** Names ranked best first for this key; ties (practically impossible) by name. */
export function rendezvousRank(key: string, names: readonly string[]): string[] {
  // One name (a fleet of one host, or one candidate left) ranks first without a hash.
  if (names.length < 2) return names.slice();
  return names
    .map((name) => ({ name, w: rendezvousWeight(key, name) }))
    .sort((a, b) => (a.w === b.w ? (a.name < b.name ? -1 : 1) : a.w > b.w ? -1 : 1))
    .map((x) => x.name);
}

/**
 * Weighted rendezvous ranking: each name's score is weight ÷ −ln(u), u its
 * hash for the key mapped into (0, 1), so a name comes first for a share of
 * keys proportional to its weight (a host with twice the slots is home to
 * twice the sessions), and removing one name still moves only its keys.
 * A weight of 0 or less counts as a tiny one (such a name is ranked, last in practice).
 */
export function weightedRendezvousRank(key: string, names: readonly { name: string; weight: number }[]): string[] {
  if (names.length < 2) return names.map((n) => n.name);
  return names
    .map(({ name, weight }) => {
      const u = (Number(rendezvousWeight(key, name) >> 11n) + 0.5) / 2 ** 53;
      return { name, s: Math.max(weight, 1e-9) / -Math.log(u) };
    })
    .sort((a, b) => (a.s === b.s ? (a.name < b.name ? -1 : 1) : b.s - a.s))
    .map((x) => x.name);
}
