/**
 * The prefix-chain arithmetic every cache model shares (cache-model.ts,
 * block-cache.ts): which links a digest samples, what counts as a miss, a
 * chain in the engine's tokens, a reply's link, and how much of a chain a
 * set of held links covers. Pure.
 */
import { GENERATION_PROMPT } from '../prompt/canonical.ts';
import type { ChainLink, PrefixChain } from '../prompt/held.ts';
import { CHARS_PER_TOKEN } from '../prompt/tokens.ts';
import type { CacheOutcome } from './cache-model.ts';

/**
 * An engine's count below the prediction by more than this share of the
 * prompt (or MISS_MIN_TOKENS) is a miss: the model believed something the
 * engine did not hold.
 */
export const MISS_SHARE = 0.1;
export const MISS_MIN_TOKENS = 16;

/**
 * The links of a slot's prompt a digest publishes, as indices into its n
 * links: the last ones, then ever further back (n-1, n-2, n-3, n-5, n-9, …),
 * and always the first. A conversation's next turn contains its whole
 * previous prompt, so it finds the last link; a request that leaves the
 * conversation part way (an edit, a shared system prompt) finds a link not
 * far before where it leaves it. About log2(n) + 2 links instead of n keeps
 * digests small (polls carry them every second).
 */
export function sampledIndices(n: number): number[] {
  const out: number[] = [];
  for (let back = 1; back <= n; back = back === 1 ? 2 : 2 * back - 1) out.push(n - back);
  if (n > 0 && out[out.length - 1] !== 0) out.push(0);
  return out;
}

/** Is an engine's count a miss against the prediction? */
export function isMiss(predicted: number, actual: number, promptTokens: number): boolean {
  return predicted - actual > Math.max(MISS_MIN_TOKENS, MISS_SHARE * promptTokens);
}

/**
 * The chain in the engine's tokens: when the engine counted `promptTokens`
 * for the whole prompt, every link is scaled by that over the chain's own
 * estimate (bytes ÷ 4), so a digest speaks the engine's tokens.
 */
export function scaleChain(chain: PrefixChain, promptTokens: number | undefined): PrefixChain {
  const last = chain.length ? chain[chain.length - 1].tokens : 0;
  if (promptTokens === undefined || !(promptTokens > 0) || last <= 0 || promptTokens === last) return chain;
  const f = promptTokens / last;
  return chain.map((l) => ({ hash: l.hash, tokens: Math.round(l.tokens * f) }));
}

/**
 * What an engine holds after answering: the prompt's chain in its tokens
 * (`scaled`), then the reply's link, its tokens the chain's estimate scaled
 * as the prompt's was. Not the engine's completion count: that counts what
 * it generated, where the cache is met by what the client echoes (the sim
 * engine counts words generated and characters cached), and the prompt's
 * own ratio turns the reply's characters into the engine's tokens as it did
 * the prompt's. `credit` (0–1): the share of a reply this engine has been
 * seen to reuse (ReplyCredit).
 */
export function withReply(scaled: PrefixChain, chain: PrefixChain, o: CacheOutcome, credit = 1): PrefixChain {
  const r = o.reply;
  const last = scaled[scaled.length - 1];
  const own = chain[chain.length - 1];
  if (!r || !last || !own || r.tokens < own.tokens) return scaled;
  // The reply's segment opens with the assistant's turn, which the prompt already ended with (and the engine counted).
  const added = Math.max(0, r.tokens - own.tokens - GENERATION_PROMPT.length / CHARS_PER_TOKEN);
  return [...scaled, { hash: r.hash, tokens: last.tokens + Math.round((credit * added * last.tokens) / Math.max(1, own.tokens)) }];
}

/**
 * How much of an echoed reply an engine really reuses, learned from its
 * counts: an engine whose generated tokens are not what the echo tokenizes
 * to (a tokenizer that does not round-trip, a template that rewrites earlier
 * turns) parts from the next prompt inside the reply. Each turn that reached
 * through a recorded reply moves the share a quarter of the way to what the
 * engine reused of it; it starts at all of it (an engine holds what it
 * generated).
 */
export class ReplyCredit {
  share = 1;
  /** A turn predicted through a reply from `from` to `to` tokens; the engine reused `cached`. */
  observe(from: number, to: number, cached: number): void {
    if (!(to > from)) return;
    const seen = Math.min(1, Math.max(0, (cached - from) / (to - from)));
    this.share += (seen - this.share) / 4;
  }
}

/** The links of a chain up to `tokens` (what a slot keeps of a prompt abandoned during prefill). */
export function prefixUpTo(chain: PrefixChain, tokens: number): ChainLink[] {
  const out: ChainLink[] = [];
  for (const l of chain) {
    if (l.tokens > tokens) break;
    out.push(l);
  }
  return out;
}

/** The tokens `held` (hash → tokens, in the engine's count) has of the prompt whose chain is `chain`: those of its deepest held link. */
export function heldOf(chain: PrefixChain, held: ReadonlyMap<string, number>): number {
  for (let i = chain.length - 1; i >= 0; i--) {
    const t = held.get(chain[i].hash);
    if (t !== undefined) return t;
  }
  return 0;
}

/** The same in the chain's own tokens (bytes ÷ 4): the similarity share compares like with like. */
export function chainTokensHeld(chain: PrefixChain, held: ReadonlyMap<string, number>): number {
  for (let i = chain.length - 1; i >= 0; i--) if (held.has(chain[i].hash)) return chain[i].tokens;
  return 0;
}

export function holding(links: PrefixChain): Map<string, number> {
  return new Map(links.map((l) => [l.hash, l.tokens]));
}
