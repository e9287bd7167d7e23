/**
 * The routing benchmark's oracle: a client-side router that knows every
 * engine exactly (its clocks, its slots, what it has queued and what each
 * slot's prompt cache holds) because it sends them all their requests and
 * mirrors the sim engine's own slot choice (prompt-cache.ts, the function
 * the engine runs). For each request it replays each engine's queue from
 * that state and predicts when the request would get a slot (wait) and how
 * long its prefill would take there (the cache included), then sends it to
 * the engine with the least `waitWeight × wait + prefill`.
 *
 * Eviction-aware (issue 25, the `oracle-evict` arm): it also chooses the
 * slot as viiwork's executor does (route/slots.ts: the slot this prompt
 * continues, else the idle one worth least), names it to the engine as
 * `id_slot`, and adds to each engine's score the expected re-prefill of what
 * its slot would destroy, weighted by the chance that conversation returns
 * (from the gaps between turns it has seen).
 *
 * Pool-aware (`ramTokens`, the sims' `cache_ram`): the mirror also keeps
 * each engine's host-RAM prompt cache (prompt/ram-pool.ts, the model the sim
 * itself runs) and today's slot rule, so a prompt pushed out of its slot and
 * restored from RAM prices as the engine will serve it.
 *
 * The mirror follows the real engine by what the client sees: a request
 * arrives when sent, its slot's end is re-timed when its first token comes
 * (then its slot is the one the engine names), and the slot frees, holding
 * prompt + answer, when its stream ends.
 */
import { chooseSlot, chooseSlotBy, commonPrefixTokens, reusableTokens, tokenCount, type SlotState } from '../../src/engines/prompt-cache.ts';
import { RamPool, TODAY_SIMILARITY, type PromptMeasure } from '../../src/prompt/ram-pool.ts';
import { chooseSlot as chooseNodeSlot, evictionMs, TurnGaps, type Eviction, type SlotView } from '../../src/route/slots.ts';
import { decodeMs, prefillMs, type EngineSpec } from './chat-trace.ts';

interface MSlot extends SlotState {
  /** request in it (when busy) */
  req?: number;
  /** its prompt (when busy): the slot holds prompt + answer once it frees */
  prompt: string;
  /** predicted end of the request in it */
  freeAt: number;
  /** when it last freed (performance.now ms; 0: never) */
  freedAt: number;
  /** tokens of its text that no other slot holds (eviction-aware mirrors) */
  unique: number;
  /** answer tokens of the request in it, when the trace sets them */
  out?: number;
}

interface MReq {
  id: number;
  prompt: string;
  tokens: number;
  /** its answer's tokens (undefined: the engine's fixed count) */
  out?: number;
}

export interface Prediction {
  wait: number;
  prefill: number;
  cached: number;
  /** What its slot destroys (eviction-aware, when it gets a slot at once). */
  evicted?: Eviction;
}

interface Choice {
  slot: number;
  cachedTokens: number;
  evicted?: Eviction;
}

/** Texts as the sim measures them. */
const TEXT: PromptMeasure<string> = { tokens: tokenCount, common: commonPrefixTokens };

export class EngineMirror {
  readonly slots: MSlot[];
  /** The engine's host-RAM prompt cache, when it has one. */
  readonly ram: RamPool<string> | undefined;
  #waiting: MReq[] = [];
  #clock = 0;
  #where = new Map<number, number>();

  constructor(
    readonly e: EngineSpec,
    readonly answer: string,
    readonly similarity = 0.5,
    /** Choose slots as viiwork does (and learn turn gaps into it); undefined: the engine's own rule. */
    readonly gaps?: TurnGaps,
    /** The engine's host-RAM prompt cache in tokens (the sim's `cache_ram`); 0: none. */
    ramTokens = 0,
  ) {
    this.ram = ramTokens > 0 ? new RamPool<string>(TEXT, ramTokens) : undefined;
    this.slots = Array.from({ length: e.slots }, (_, id) => ({ id, busy: false, text: '', lastUsed: 0, prompt: '', freeAt: 0, freedAt: 0, unique: 0 }));
  }

  /**
   * The slot a prompt gets among `slots` now: the engine's rule, or viiwork's (eviction-aware). With a pool, the
   * engine's save and restore are applied to `pool` (the mirror's own, or a prediction's copy).
   */
  #choose(slots: readonly MSlot[], prompt: string, now: number, pool = this.ram): Choice | undefined {
    if (pool) {
      const picked = chooseSlotBy(slots, prompt, { today: true });
      if (!picked) return undefined;
      const took = pool.take(slots[picked.choice.slot].text || undefined, prompt, TODAY_SIMILARITY, picked.lru);
      const held = took.restored && took.slot !== undefined ? took.slot : slots[picked.choice.slot].text;
      return { slot: picked.choice.slot, cachedTokens: reusableTokens(held, prompt) };
    }
    if (!this.gaps) return chooseSlot(slots, prompt, { similarity: this.similarity });
    const views: SlotView[] = slots.map((s) => {
      const tokens = s.text ? tokenCount(s.text) : 0;
      const shared = s.text ? Math.min(tokens, commonPrefixTokens(s.text, prompt)) : 0;
      const v = { busy: s.busy, tokens, shared: shared >= tokens - 1 && tokens > 0 ? tokens : shared, unique: Math.min(tokens, s.unique) };
      return s.busy ? v : { ...v, idleMs: s.freedAt ? now - s.freedAt : 0 };
    });
    const p = chooseNodeSlot(views, this.gaps.chance);
    if (!p) return undefined;
    return { slot: p.index, cachedTokens: reusableTokens(slots[p.index].text, prompt), ...(p.evicted ? { evicted: p.evicted } : {}) };
  }

  /** Each slot's tokens that no other slot holds (after a slot's text changed). */
  #uniques(): void {
    if (!this.gaps) return;
    for (const s of this.slots) {
      const tokens = s.text ? tokenCount(s.text) : 0;
      let shared = 0;
      for (const o of this.slots) if (o !== s && o.text && s.text) shared = Math.max(shared, commonPrefixTokens(s.text, o.text));
      s.unique = Math.max(0, tokens - shared);
    }
  }

  /** The request was sent to this engine now: the slot it took (undefined: it waits in the engine's queue). */
  arrive(q: MReq, now: number): number | undefined {
    if (this.#waiting.length === 0 && this.#take(q, now)) return this.#where.get(q.id);
    this.#waiting.push(q);
    return undefined;
  }

  #take(q: MReq, now: number, slotId?: number): boolean {
    if (slotId !== undefined) this.ram?.take(this.slots[slotId].text || undefined, q.prompt);
    const c = slotId !== undefined ? { slot: slotId, cachedTokens: 0 } : this.#choose(this.slots, q.prompt, now);
    if (!c) return false;
    const s = this.slots[c.slot];
    // A conversation's next turn in its own slot: the gap since its last turn ended.
    if (this.gaps && s.freedAt && s.text && c.cachedTokens >= tokenCount(s.text) - 1) this.gaps.observe(now - s.freedAt);
    s.busy = true;
    s.lastUsed = ++this.#clock;
    s.text = q.prompt;
    s.prompt = q.prompt;
    s.req = q.id;
    s.out = q.out;
    s.freeAt = now + prefillMs(this.e, q.tokens, c.cachedTokens) + decodeMs(this.e, q.out);
    this.#where.set(q.id, c.slot);
    this.#uniques();
    return true;
  }

  /** Its first token came at `at`, from slot `slot` when the engine named it. */
  first(id: number, at: number, slot?: number): void {
    let k = this.#where.get(id);
    if (k === undefined) {
      // The engine started it before the mirror expected: take it out of the mirror's queue.
      const w = this.#waiting.findIndex((q) => q.id === id);
      if (w < 0) return;
      const [q] = this.#waiting.splice(w, 1);
      const free = slot !== undefined && !this.slots[slot]?.busy ? slot : this.slots.find((s) => !s.busy)?.id;
      if (free === undefined) return;
      this.#take(q, at, free);
      k = free;
    } else if (slot !== undefined && slot !== k && this.slots[slot] && !this.slots[slot].busy) {
      // The engine chose another (free) slot than the mirror did: follow it.
      const from = this.slots[k];
      const to = this.slots[slot];
      const [heldText, heldUsed] = [to.text, to.lastUsed];
      [to.busy, to.text, to.prompt, to.req, to.lastUsed, to.out] = [true, from.text, from.prompt, from.req, from.lastUsed, from.out];
      [from.busy, from.req, from.text, from.lastUsed] = [false, undefined, heldText, heldUsed];
      this.#where.set(id, slot);
      k = slot;
    }
    this.slots[k].freeAt = at + decodeMs(this.e, this.slots[k].out);
  }

  /** Its stream ended (or it failed) at `at`. */
  finish(id: number, at: number): void {
    const k = this.#where.get(id);
    this.#where.delete(id);
    if (k === undefined) {
      const w = this.#waiting.findIndex((q) => q.id === id);
      if (w >= 0) this.#waiting.splice(w, 1);
      return;
    }
    const s = this.slots[k];
    if (s.req !== id) return;
    s.busy = false;
    s.req = undefined;
    s.text = s.prompt + this.answer;
    s.freedAt = at;
    this.#uniques();
    while (this.#waiting.length && this.#take(this.#waiting[0], at)) this.#waiting.shift();
  }

  /** When `q`, sent now, would get a slot here, and its prefill there. */
  predict(q: MReq, now: number): Prediction {
    const slots: MSlot[] = this.slots.map((s) => ({ ...s, freeAt: s.busy ? Math.max(s.freeAt, now) : now }));
    const queue = [...this.#waiting, q];
    const pool = this.ram && new RamPool<string>(TEXT, this.ram.limitTokens);
    if (pool && this.ram) pool.entries.push(...this.ram.entries);
    let t = now;
    let clock = this.#clock;
    for (let guard = 0; guard < 10_000; guard++) {
      while (queue.length) {
        const c = this.#choose(slots, queue[0].prompt, t, pool);
        if (!c) break;
        const head = queue.shift()!;
        const prefill = prefillMs(this.e, head.tokens, c.cachedTokens);
        if (head === q) return { wait: t - now, prefill, cached: c.cachedTokens, ...(c.evicted && t === now ? { evicted: c.evicted } : {}) };
        const s = slots[c.slot];
        s.busy = true;
        s.lastUsed = ++clock;
        s.prompt = head.prompt;
        s.text = head.prompt;
        s.unique = head.tokens;
        s.freeAt = t + prefill + decodeMs(this.e, head.out);
      }
      const next = Math.min(...slots.filter((s) => s.busy).map((s) => s.freeAt));
      t = Math.max(t, next);
      for (const s of slots) {
        if (s.busy && s.freeAt <= t) {
          s.busy = false;
          s.text = s.prompt + this.answer;
          s.freedAt = t;
        }
      }
    }
    return { wait: Infinity, prefill: Infinity, cached: 0 };
  }
}

export class Oracle {
  readonly mirrors: EngineMirror[];
  readonly gaps: TurnGaps | undefined;
  constructor(
    engines: EngineSpec[],
    answer: string,
    readonly waitWeight: number,
    similarity = 0.5,
    evictionAware = false,
    /** Each engine's host-RAM prompt cache in tokens (the sims' `cache_ram`); 0: none. */
    ramTokens = 0,
  ) {
    this.gaps = evictionAware ? new TurnGaps() : undefined;
    this.mirrors = engines.map((e) => new EngineMirror(e, answer, similarity, this.gaps, ramTokens));
  }

  /** The engine for request `id` sent now, and (eviction-aware) the slot to name to it; records it there. */
  pick(id: number, prompt: string, tokens: number, now: number, out?: number): { engine: number; slot?: number; predicted: Prediction } {
    const q = { id, prompt, tokens, out };
    let best = 0;
    let bestScore = Infinity;
    let bestP: Prediction = { wait: 0, prefill: 0, cached: 0 };
    this.mirrors.forEach((m, k) => {
      const p = m.predict(q, now);
      const score = this.waitWeight * p.wait + p.prefill + (this.gaps ? evictionMs(p.evicted, m.e.prefillPer1k) : 0);
      if (score < bestScore) {
        bestScore = score;
        best = k;
        bestP = p;
      }
    });
    const slot = this.mirrors[best].arrive(q, now);
    return { engine: best, ...(this.gaps && slot !== undefined ? { slot } : {}), predicted: bestP };
  }
}
