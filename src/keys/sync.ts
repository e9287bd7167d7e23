/**
 * Anti-entropy for the key table (SPEC section 12, "One table for the whole
 * mesh"). Key changes travel as gossip user messages and in memberlist's
 * push-pull, but a burst of writes through several nodes (a thousand keys
 * in seconds) outruns the broadcast queue, and push-pull comes every 30 s:
 * issue 46 saw three nodes disagree on hundreds of keys for over 20 s, each
 * refusing with 401 keys the others had admitted.
 *
 * So every capacity report carries the table's digest (`key_digest`), and a
 * node whose member reports another digest than its own pulls that member's
 * whole table over a signed member call and merges it (Lamport order, so the
 * result is the same whatever order tables arrive in). Both sides poll each
 * other, so each gets what the other holds within about one capacity poll
 * once writes stop. At most one pull at a time, and none from the same
 * member within `minGapMs`, so a mesh in the middle of a burst is not
 * flooded with whole tables.
 */
import type { KeyTable } from './table.ts';

export interface KeySyncDeps {
  table: Pick<KeyTable, 'digest' | 'merge' | 'empty'>;
  /** The member's whole table (entries as on the wire), or undefined when it did not answer. */
  pull(host: string): Promise<unknown[] | undefined>;
  now(): number;
  /** Least time between two pulls from one member, ms. */
  minGapMs?: number;
}

/** Default least gap between pulls from one member: the default capacity poll. */
export const KEY_PULL_GAP_MS = 1000;

export class KeySync {
  #pulling = false;
  readonly #lastPull = new Map<string, number>();

  constructor(private readonly deps: KeySyncDeps) {}

  /**
   * A member's report said its table's digest is `digest` (undefined: it
   * holds no key, so it pulls from us once it sees ours). Pulls its table
   * when that differs from ours and no pull is under way.
   */
  seen(host: string, digest: string | undefined): void {
    const d = this.deps;
    if (digest === undefined || this.#pulling) return;
    if (!d.table.empty && digest === d.table.digest) return;
    const now = d.now();
    if (now - (this.#lastPull.get(host) ?? -Infinity) < (d.minGapMs ?? KEY_PULL_GAP_MS)) return;
    this.#lastPull.set(host, now);
    this.#pulling = true;
    d.pull(host)
      .then((entries) => {
        if (entries) d.table.merge(entries);
      })
      .catch(() => {})
      .finally(() => (this.#pulling = false));
  }

  /** Forget a member that left. */
  forget(host: string): void {
    this.#lastPull.delete(host);
  }
}
