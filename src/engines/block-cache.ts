/**
 * The `blocks` cache model: a shared block cache (vLLM-like `openai`
 * engines) in which every chain link costs its own tokens of a budget,
 * least recently used out; the budget shrinks to what the engine's counts
 * show it really keeps.
 */
import type { PrefixChain } from '../prompt/held.ts';
import { isMiss, prefixUpTo, scaleChain, withReply } from './cache-chain.ts';
import type { CacheModel, CacheOutcome, CacheTicket, HeldLink } from './cache-model.ts';

interface Block {
  tokens: number;
  /** Its own tokens: those past the link before it. */
  cost: number;
  used: number;
  /** Tie-break inside one use: deeper links go first (they are useless without their parents). */
  depth: number;
}

export class BlockCache implements CacheModel {
  readonly kind = 'blocks';
  changes = 0;
  readonly #blocks = new Map<string, Block>();
  /** hash → tokens of every block in #blocks (liveHeld). */
  readonly #held = new Map<string, number>();
  #total = 0;

  constructor(private budget: number) {}

  begin(chain: PrefixChain, now: number): CacheTicket {
    let predicted = 0;
    for (let i = chain.length - 1; i >= 0 && predicted === 0; i--) predicted = this.#blocks.get(chain[i].hash)?.tokens ?? 0;
    this.#store(chain, now);
    return { predicted, chain };
  }

  finish(t: CacheTicket, o: CacheOutcome, now: number): void {
    const chain = scaleChain(t.chain, o.promptTokens);
    if (o.cachedTokens !== undefined && isMiss(t.predicted, o.cachedTokens, o.promptTokens ?? 0)) {
      // The engine evicted sooner than the budget said: it holds at most what we held, less what it dropped.
      this.budget = Math.max(chain.length ? chain[chain.length - 1].tokens : 0, this.#total - (t.predicted - o.cachedTokens));
    }
    if (o.processed) this.#store(withReply(chain, t.chain, o), now);
    else this.#store(prefixUpTo(chain, o.cachedTokens ?? t.predicted), now);
  }

  /**
   * The blocks Map is kept in least-recently-used order, oldest first: a
   * chain is (re)inserted deepest link first, so within one use the deeper
   * links sit older (they go first, being useless without their parents).
   * Eviction pops from the front and the digest reads from the back, with
   * no sort: a node with thousands of blocks rebuilt its digest in
   * milliseconds per request when both sorted.
   */
  #store(chain: PrefixChain, now: number): void {
    for (let depth = chain.length - 1; depth >= 0; depth--) {
      const l = chain[depth];
      const old = this.#blocks.get(l.hash);
      if (old) {
        this.#total -= old.cost;
        this.#blocks.delete(l.hash);
      }
      const cost = Math.max(0, l.tokens - (depth > 0 ? chain[depth - 1].tokens : 0));
      this.#blocks.set(l.hash, { tokens: l.tokens, cost, used: now, depth });
      this.#held.set(l.hash, l.tokens);
      this.#total += cost;
    }
    if (chain.length) this.changes++;
    this.#evict();
  }

  #evict(): void {
    for (const [hash, b] of this.#blocks) {
      if (this.#total <= this.budget) break;
      this.#blocks.delete(hash);
      this.#held.delete(hash);
      this.#total -= b.cost;
    }
  }

  liveHeld(): ReadonlyMap<string, number> {
    return this.#held;
  }

  held(): HeldLink[] {
    const out: HeldLink[] = [];
    for (const [hash, b] of this.#blocks) out.push({ hash, tokens: b.tokens, used: b.used });
    return out.reverse();
  }
}
