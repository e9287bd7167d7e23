/**
 * Today's llama-server host-RAM prompt cache (`--cache-ram`, SPEC section 3;
 * ../shared/llama-server-today.md section 1), as a pure model: what the
 * engine does when a slot is taken, so the executor's cache model
 * (cache-model.ts, over chain links) and the sim engine (prompt-cache.ts,
 * over texts) predict and behave alike. Generic over the prompt `P`: the
 * caller says how long a prompt is and how much two prompts share.
 *
 * The rules, from tools/server (server-context.cpp `get_available_slot`,
 * server-task.cpp `server_prompt_cache::alloc/load/update`):
 * - Taking a slot saves its prompt to RAM when the slot holds one and keeps
 *   less than half of it (f_keep = lcp / slot < 0.5; a share of the request
 *   at or under the similarity threshold counts as keeping nothing). A slot
 *   that keeps half or more is overwritten in place: its tail is lost.
 * - Saving skips a prompt some entry already contains, and one larger than
 *   the whole pool; drops the entries the new one contains; then drops the
 *   oldest insertions until the new one fits; then appends it.
 * - After a save, the entry that beats the slot on both f_keep and f_sim
 *   (lcp / request), among those keeping at least a quarter of themselves,
 *   moves into the slot (it leaves RAM). An empty slot named by `id_slot`
 *   is never considered (the engine's f_keep is 0/0 there), so nothing is
 *   restored into it.
 *
 * Pure: no I/O, no clock.
 */

/** How a caller's prompts compare. */
export interface PromptMeasure<P> {
  /** Tokens of a prompt. */
  tokens(p: P): number;
  /** Tokens two prompts share from their start. */
  common(a: P, b: P): number;
}

/** llama-server's `--slot-prompt-similarity` default in today's build (b4748's was 0.5). */
export const TODAY_SIMILARITY = 0.1;
/** A slot keeping less than this share of its prompt is saved to RAM before it is reused. */
export const SAVE_BELOW_KEEP = 0.5;
/** An entry is restored only when the request keeps at least this share of it ("don't trash large prompts"). */
export const RESTORE_MIN_KEEP = 0.25;

export interface PoolEntry<P> {
  readonly prompt: P;
  readonly tokens: number;
}

/** What taking a slot does to the pool and the slot. */
export interface PoolTake<P> {
  /** The slot's prompt was saved to RAM (it is not lost). */
  saved: boolean;
  /** What the slot holds now: a restored entry's prompt, else its own. */
  slot: P | undefined;
  /** An entry came back from RAM into the slot. */
  restored: boolean;
  /** Entries the save pushed out of the pool (lost). */
  dropped: PoolEntry<P>[];
}

/**
 * Would the engine save the slot holding `slot` to RAM when it is taken for
 * `request`? (f_keep < 0.5; a share of the request at or under `similarity`
 * keeps nothing; an empty slot never.)
 */
export function savesSlot(slotTokens: number, shared: number, requestTokens: number, similarity = TODAY_SIMILARITY): boolean {
  if (!(slotTokens > 0)) return false;
  const fSim = requestTokens > 0 ? shared / requestTokens : 0;
  const keep = similarity !== 0 && fSim > similarity ? shared / slotTokens : 0;
  return keep < SAVE_BELOW_KEEP;
}

export class RamPool<P> {
  /** Oldest insertion first: the engine drops from the front. */
  readonly entries: PoolEntry<P>[] = [];

  constructor(
    private readonly measure: PromptMeasure<P>,
    /** The pool's size in tokens (the caller turns MiB into tokens by the model's KV bytes per token); Infinity: no limit. */
    public limitTokens: number,
  ) {}

  get usedTokens(): number {
    let n = 0;
    for (const e of this.entries) n += e.tokens;
    return n;
  }

  /** What saving `p` would drop, changing nothing (the entries it contains are replaced, not lost). */
  wouldDrop(p: P): PoolEntry<P>[] {
    return this.#plan(p)?.dropped ?? [];
  }

  /** undefined: not stored (empty, or larger than the pool); `held`: an entry already contains it. */
  #plan(p: P): { keep: PoolEntry<P>[]; dropped: PoolEntry<P>[]; tokens: number; held?: true } | undefined {
    const tokens = this.measure.tokens(p);
    if (tokens <= 0) return undefined;
    if (this.entries.some((e) => this.measure.common(e.prompt, p) >= tokens)) return { keep: this.entries, dropped: [], tokens, held: true };
    if (tokens > this.limitTokens) return undefined;
    const keep = this.entries.filter((e) => this.measure.common(e.prompt, p) < e.tokens);
    const dropped: PoolEntry<P>[] = [];
    let used = 0;
    for (const e of keep) used += e.tokens;
    while (keep.length && used + tokens > this.limitTokens) {
      const e = keep.shift()!;
      used -= e.tokens;
      dropped.push(e);
    }
    return { keep, dropped, tokens };
  }

  /** Save a prompt (server_prompt_cache::alloc): the entries dropped to make room; undefined when it is not in RAM after. */
  save(p: P): PoolEntry<P>[] | undefined {
    const plan = this.#plan(p);
    if (!plan) return undefined;
    if (plan.held) return [];
    this.entries.length = 0;
    this.entries.push(...plan.keep, { prompt: p, tokens: plan.tokens });
    return plan.dropped;
  }

  /**
   * The entry the engine would restore into a slot holding `slot` for
   * `request` (server_prompt_cache::load), changing nothing; -1: none.
   */
  best(slot: P | undefined, request: P): number {
    const reqTokens = Math.max(1, this.measure.tokens(request));
    const slotTokens = slot === undefined ? 0 : this.measure.tokens(slot);
    const lcp = slot === undefined ? 0 : this.measure.common(slot, request);
    let keepBest = slotTokens > 0 ? lcp / slotTokens : -1;
    let simBest = lcp / reqTokens;
    let best = -1;
    for (let i = 0; i < this.entries.length; i++) {
      const e = this.entries[i];
      const l = this.measure.common(e.prompt, request);
      const keep = l / Math.max(1, e.tokens);
      const sim = l / reqTokens;
      if (keep < RESTORE_MIN_KEEP) continue;
      if (keepBest < keep && simBest < sim) {
        keepBest = keep;
        simBest = sim;
        best = i;
      }
    }
    return best;
  }

  /**
   * A slot holding `slot` is taken for `request` (by similarity or
   * `id_slot`; `lru`: the engine's least-recently-used pick, which always
   * saves and then restores, into an empty slot too): the save and the
   * restore the engine does, applied.
   */
  take(slot: P | undefined, request: P, similarity = TODAY_SIMILARITY, lru = false): PoolTake<P> {
    const slotTokens = slot === undefined ? 0 : this.measure.tokens(slot);
    const shared = slot === undefined ? 0 : this.measure.common(slot, request);
    if (!lru && (slot === undefined || !savesSlot(slotTokens, shared, this.measure.tokens(request), similarity))) return { saved: false, slot, restored: false, dropped: [] };
    const dropped = slot === undefined ? [] : this.save(slot);
    const i = this.best(slot, request);
    if (i < 0) return { saved: dropped !== undefined, slot, restored: false, dropped: dropped ?? [] };
    const [e] = this.entries.splice(i, 1);
    return { saved: dropped !== undefined, slot: e.prompt, restored: true, dropped: dropped ?? [] };
  }

  /** Forget everything (the engine restarted). */
  clear(): void {
    this.entries.length = 0;
  }
}
