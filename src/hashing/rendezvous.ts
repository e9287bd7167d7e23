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
  return names
    .map((name) => ({ name, w: rendezvousWeight(key, name) }))
    .sort((a, b) => (a.w === b.w ? (a.name < b.name ? -1 : 1) : a.w > b.w ? -1 : 1))
    .map((x) => x.name);
}
