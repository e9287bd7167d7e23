/**
 * What one backend's engine holds in its prompt cache, as the executor
 * believes it (SPEC section 7, "Cache digest"): a model per engine kind, fed
 * with the prefix chain of every request the executor sends the engine and
 * corrected by the cached-token count the engine answers with.
 *
 * - `llama`: llama-server's slots, one prompt each; a free slot is placed by
 *   llama-server's own slot-similarity rule (the engine picks, the model
 *   follows the same rule). The sim engine is such a model too.
 * - `chosen`: llama-server's slots, the slot chosen by the node and sent as
 *   `id_slot` (same rule, but the engine is told, so the model is exact).
 * - `lifo`: the embedded engine's context sequences: the one freed last is
 *   handed out first (engines/embedded-server.ts), exact.
 * - `blocks`: a shared block cache (vLLM-like `openai` engines): every link
 *   costs its own tokens of a budget, least recently used out.
 *
 * Pure: no I/O, no clock (recency is a counter the caller passes in), so
 * table tests drive it. Hashes are what prompt/held.ts calls chain links.
 */
import type { ChainLink, PrefixChain } from '../prompt/held.ts';

export type CacheModelKind = 'llama' | 'chosen' | 'lifo' | 'blocks';

/** llama-server's `--slot-prompt-similarity` default. */
export const DEFAULT_SIMILARITY = 0.5;

/**
 * An engine's count below the prediction by more than this share of the
 * prompt (or MISS_MIN_TOKENS) is a miss: the model believed something the
 * engine did not hold.
 */
const MISS_SHARE = 0.1;
const MISS_MIN_TOKENS = 16;

export interface CacheModelOptions {
  kind: CacheModelKind;
  /** Slots (parallel) of the backend. */
  slots: number;
  /** llama-server's --slot-prompt-similarity (llama, chosen). */
  similarity?: number;
  /** blocks: the tokens the cache holds at most (default: slots × context). */
  budgetTokens?: number;
}

/** What the engine said about one request when it ended. */
export interface CacheOutcome {
  /** The prompt was processed (an answer came); false: abandoned, the slot keeps what it reused. */
  processed: boolean;
  /** The engine's prompt tokens (usage.prompt_tokens). */
  promptTokens?: number;
  /** The engine's cached tokens (cached_tokens, cache_n, or prompt tokens − prompt_n). */
  cachedTokens?: number;
}

/** One request between begin and finish. */
export interface CacheTicket {
  /** The slot it runs in (slot kinds); for `chosen` the node sends it as `id_slot`. */
  readonly slot?: number;
  /** The tokens the model expects the engine to reuse. */
  readonly predicted: number;
  readonly chain: PrefixChain;
}

/** A held link and when it was last used (the caller's counter). */
export interface HeldLink {
  readonly hash: string;
  readonly tokens: number;
  readonly used: number;
  /** Held only by slots busy with another request, short of its last link (see CacheDigest.busy). */
  readonly busy?: boolean;
}

export interface CacheModel {
  readonly kind: CacheModelKind;
  /** Bumped on every change of what is held. */
  readonly changes: number;
  /** A request starts (it holds a slot of this backend): where it runs and what the engine will reuse. */
  begin(chain: PrefixChain, now: number): CacheTicket;
  /** It ended: the engine's own counts correct the model. */
  finish(t: CacheTicket, o: CacheOutcome, now: number): void;
  /** What is held, most recently used first (a hash at most once). */
  held(): HeldLink[];
}

export function cacheModel(opts: CacheModelOptions): CacheModel {
  return opts.kind === 'blocks' ? new BlockCache(opts.budgetTokens ?? Infinity) : new SlotCache(opts.kind, Math.max(1, opts.slots), opts.similarity ?? DEFAULT_SIMILARITY);
}

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

/** The links of a chain up to `tokens` (what a slot keeps of a prompt abandoned during prefill). */
function prefixUpTo(chain: PrefixChain, tokens: number): ChainLink[] {
  const out: ChainLink[] = [];
  for (const l of chain) {
    if (l.tokens > tokens) break;
    out.push(l);
  }
  return out;
}

interface Slot {
  readonly id: number;
  busy: boolean;
  links: PrefixChain;
  hashes: Map<string, number>;
  /** When it was last taken (0: never). */
  taken: number;
  /** When it was last given back (0: never), for the lifo pool. */
  freed: number;
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
function chainTokensHeld(chain: PrefixChain, held: ReadonlyMap<string, number>): number {
  for (let i = chain.length - 1; i >= 0; i--) if (held.has(chain[i].hash)) return chain[i].tokens;
  return 0;
}

function holding(links: PrefixChain): Map<string, number> {
  return new Map(links.map((l) => [l.hash, l.tokens]));
}

class SlotCache implements CacheModel {
  readonly slots: Slot[];
  changes = 0;

  constructor(
    readonly kind: 'llama' | 'chosen' | 'lifo',
    n: number,
    private readonly similarity: number,
  ) {
    this.slots = Array.from({ length: n }, (_, id) => ({ id, busy: false, links: [], hashes: new Map(), taken: 0, freed: 0 }));
  }

  /** The free slot a request with `chain` gets, by the engine's rule; undefined when every slot is busy. */
  #choose(chain: PrefixChain): Slot | undefined {
    const free = this.slots.filter((s) => !s.busy);
    if (free.length === 0) return undefined;
    if (this.kind === 'lifo') {
      // The pool pops the sequence freed last; never freed: the last of the initial list.
      return free.reduce((a, b) => (b.freed > a.freed || (b.freed === a.freed && b.id > a.id) ? b : a));
    }
    // llama-server: the longest cached prefix when it covers more than `similarity` of the prompt, else least
    // recently used. The share is taken in the chain's own tokens (both sides of it counted the same way).
    const total = chain.length ? chain[chain.length - 1].tokens : 0;
    let best: Slot | undefined;
    let bestTokens = 0;
    for (const s of free) {
      const shared = chainTokensHeld(chain, s.hashes);
      if (shared === 0 || total === 0 || shared / total <= this.similarity) continue;
      if (!best || shared > bestTokens || (shared === bestTokens && s.taken < best.taken)) {
        best = s;
        bestTokens = shared;
      }
    }
    return best ?? free.reduce((a, b) => (b.taken < a.taken ? b : a));
  }

  begin(chain: PrefixChain, now: number): CacheTicket {
    const slot = this.#choose(chain);
    // More requests than modelled slots (the engine queues them): predicted cold, nothing changes.
    if (!slot) return { predicted: 0, chain };
    const predicted = heldOf(chain, slot.hashes);
    slot.busy = true;
    slot.taken = now;
    // While it runs the slot is already the new prompt's: a related request routed meanwhile finds it here.
    this.#hold(slot, chain);
    return { slot: slot.id, predicted, chain };
  }

  finish(t: CacheTicket, o: CacheOutcome, now: number): void {
    if (t.slot === undefined) return;
    const slot = this.slots[t.slot];
    slot.busy = false;
    slot.freed = now;
    const chain = scaleChain(t.chain, o.promptTokens);
    const reused = o.cachedTokens ?? t.predicted;
    // Abandoned during prefill: the slot keeps what it reused; else the whole prompt, in the engine's tokens.
    this.#hold(slot, o.processed ? chain : prefixUpTo(chain, reused));
    if (o.cachedTokens !== undefined && this.kind === 'llama' && isMiss(t.predicted, o.cachedTokens, o.promptTokens ?? 0)) {
      // The engine did not reuse what the model expected: it placed the request elsewhere, or the rule
      // differed. Whatever else the model believes deeper than the engine's count for this prompt is doubtful.
      for (const s of this.slots) if (s !== slot && !s.busy && heldOf(t.chain, s.hashes) > o.cachedTokens) this.#hold(s, []);
    }
  }

  #hold(slot: Slot, links: PrefixChain): void {
    slot.links = links;
    slot.hashes = holding(links);
    this.changes++;
  }

  held(): HeldLink[] {
    const order = [...this.slots].filter((s) => s.links.length).sort((a, b) => Math.max(b.taken, b.freed) - Math.max(a.taken, a.freed) || a.id - b.id);
    // What a new request could get now: the engine places it in a free slot only.
    const free = this.slots.filter((s) => !s.busy);
    const seen = new Set<string>();
    const out: HeldLink[] = [];
    for (const s of order) {
      const used = Math.max(s.taken, s.freed);
      const last = s.links.length - 1;
      for (const i of sampledIndices(s.links.length)) {
        const l = s.links[i];
        if (seen.has(l.hash)) continue;
        seen.add(l.hash);
        const busy = s.busy && i !== last && !free.some((f) => f.hashes.has(l.hash));
        out.push(busy ? { hash: l.hash, tokens: l.tokens, used, busy } : { hash: l.hash, tokens: l.tokens, used });
      }
    }
    return out;
  }
}

interface Block {
  tokens: number;
  /** Its own tokens: those past the link before it. */
  cost: number;
  used: number;
  /** Tie-break inside one use: deeper links go first (they are useless without their parents). */
  depth: number;
}

class BlockCache implements CacheModel {
  readonly kind = 'blocks';
  changes = 0;
  readonly #blocks = new Map<string, Block>();
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
    if (o.processed) this.#store(chain, now);
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
      this.#total += cost;
    }
    if (chain.length) this.changes++;
    this.#evict();
  }

  #evict(): void {
    for (const [hash, b] of this.#blocks) {
      if (this.#total <= this.budget) break;
      this.#blocks.delete(hash);
      this.#total -= b.cost;
    }
  }

  held(): HeldLink[] {
    const out: HeldLink[] = [];
    for (const [hash, b] of this.#blocks) out.push({ hash, tokens: b.tokens, used: b.used });
    return out.reverse();
  }
}
