/**
 * What routing knows of prompt caches (SPEC sections 7 and 9, step 6): a
 * request's prefix chain, and a target's cache digest, the hashes of chain
 * links its engines are believed to hold. The two meet in `heldTokens`: the
 * tokens at the start of a prompt that a host already holds.
 *
 * Pure: no I/O. The chain itself is computed in `chain.ts`, one
 * definition used by the entry node's router, the executor's digests and the
 * sim engine's cache model alike.
 */

/**
 * One boundary of a prompt: the hash of everything up to and including it,
 * chained to the link before (so a link found in a digest means the whole
 * prefix up to it is held), and the prompt tokens up to it.
 */
export interface ChainLink {
  /** 16 lowercase hex digits (64 bits of SHA-256 over the chained canonical text). */
  readonly hash: string;
  /** Prompt tokens from the start of the prompt to this boundary (cumulative, non-decreasing). */
  readonly tokens: number;
}

/** A prompt's boundaries in order, first (tools and system) to last. */
export type PrefixChain = readonly ChainLink[];

/** What one target's engines are believed to hold: chain hash → tokens up to that link. */
export interface CacheDigest {
  /** Bumped by the executor on every change; an unchanged digest is not resent. */
  readonly version: number;
  readonly held: ReadonlyMap<string, number>;
  /**
   * Hashes of `held` that only slots busy with another request hold, short of
   * that request's last link: a new request that shares only a prefix of a
   * running one (a shared system prompt) gets a free slot, which lacks it, so
   * they count only when the host has no free slot (SPEC 9.6: the wait for a
   * warm full host). A running request's last link is never here: its next
   * turn comes after it and finds its slot.
   */
  readonly busy?: ReadonlySet<string>;
  /** Per slot, what it holds (slot-kind engines; undefined: not reported). */
  readonly slots?: readonly SlotHold[];
  /**
   * The prompts held in the target's host-RAM prompt caches (today's
   * llama-server `--cache-ram`, SPEC section 7 "RAM pool"): chain hash →
   * tokens, as `held`. Present (even empty) when its engines have a pool:
   * a slot taken there moves its prompt to RAM instead of destroying it.
   */
  readonly ram?: ReadonlyMap<string, number>;
}

/**
 * Tokens of the prompt whose chain is `chain` that a holder of `held`
 * already has: those of the deepest link it holds (chained hashes make the
 * deepest match the longest common prefix), 0 when it holds none. A map
 * gives its own count for that link (a digest's tokens are the engine's own,
 * SPEC 9.6: "token counts come from the engine's own usage reports where
 * known"); a set, the chain's. Hashes in `skip` count as not held.
 */
export function heldTokens(chain: PrefixChain, held: ReadonlyMap<string, number> | ReadonlySet<string>, skip?: ReadonlySet<string>): number {
  for (let i = chain.length - 1; i >= 0; i--) {
    if (!held.has(chain[i].hash) || skip?.has(chain[i].hash)) continue;
    const own = held instanceof Map ? (held as ReadonlyMap<string, number>).get(chain[i].hash) : undefined;
    return own ?? chain[i].tokens;
  }
  return 0;
}

/**
 * One slot of a slot-kind engine as a digest tells it (SPEC section 7, "Slot
 * state"): the chain link its cached prompt ends at, whether it is busy, and
 * for an idle one since when. What lets an entry node price what a placement
 * would evict (SPEC 9.6, "Eviction").
 */
export interface SlotHold {
  /** The last link of the prompt it holds (tokens in the engine's count); undefined: the slot is empty. */
  readonly last?: ChainLink;
  /**
   * The link its prompt's head ends at (tools and system: what another conversation shares with it), when
   * known and short of `last`: what a new conversation reuses if it takes this slot.
   */
  readonly head?: ChainLink;
  /**
   * The link before `last`, when it lies past the head: a prompt that shares it continues this slot's
   * conversation, though its own last link differs (the conversation's last message, or last 1 KiB of a
   * completion prompt, grew since: see continuesInPlace).
   */
  readonly prev?: ChainLink;
  /** Tokens of that prompt no other slot of the target holds: what taking the slot destroys at most. */
  readonly unique: number;
  readonly busy: boolean;
  /** Idle slots: when (the reader's clock, ms) its last request ended. */
  readonly idleSince?: number;
  /** Turns its conversation has had on the target (SlotView.turns); undefined: the executor did not say. */
  readonly turns?: number;
}

/**
 * Does a prompt sharing `shared` tokens with a slot that holds `tokens` (its head, tools and system, `head` tokens
 * when known) continue that slot's conversation? When the slot's whole prompt is its prefix; or when it shares
 * more than the head and at least half of the slot (the engine then reuses the slot in place, keeping the shared
 * part: llama-server saves a slot to RAM only below half). A prompt that grew inside its last message, or inside
 * its last 1 KiB of a completion, shares all but that link: the same conversation, whose old tail it replaces. One
 * that shares only the head is another conversation (issue 25: taking its slot destroys that one's history).
 */
export function continuesInPlace(tokens: number, shared: number, head: number | undefined): boolean {
  if (tokens <= 0) return false;
  if (shared >= tokens) return true;
  return head !== undefined && shared > head && 2 * shared >= tokens;
}

/** One slot as a slot choice sees it for one prompt: route/slots.ts decides on it, engines/cache-model.ts fills it for its own choice. */
export interface SlotView {
  readonly busy: boolean;
  /** Tokens of the prompt it holds (0: empty). */
  readonly tokens: number;
  /** Tokens at the start of this request's prompt the slot already holds. */
  readonly shared: number;
  /** Of the prompt it holds, tokens no other slot of the engine holds. */
  readonly unique: number;
  /** Tokens of its prompt's head (tools and system), when known: a prompt sharing past it is the same conversation. */
  readonly head?: number;
  /** Idle slots: ms since its last request ended. */
  readonly idleMs?: number;
  /** Turns its conversation has had on this backend, whichever slots they took (1: a new one; undefined: not said). */
  readonly turns?: number;
  /**
   * On an engine with a host-RAM prompt cache (today's llama-server): taking the slot saves its prompt to RAM, so
   * its conversation comes back by a restore, not a re-prefill (SPEC 9.6). undefined: no pool (today's rule).
   */
  readonly pooled?: boolean;
  /** With a pool: tokens of this prompt the engine restores from RAM into the slot when it is taken. */
  readonly restore?: number;
  /** With a pool: the prompts the save pushes out of the pool, lost (tokens, and their idle time). */
  readonly drops?: readonly { readonly tokens: number; readonly idleMs: number; readonly turns?: number }[];
}
