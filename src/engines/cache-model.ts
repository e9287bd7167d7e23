/**
 * What one backend's engine holds in its prompt cache, as the executor
 * believes it (SPEC section 7, "Cache digest"): a model per engine kind, fed
 * with the prefix chain of every request the executor sends the engine and
 * corrected by the cached-token count the engine answers with.
 *
 * - `llama`: llama-server's slots, one prompt each; a free slot is placed by
 *   llama-server's own slot-similarity rule (the engine picks, the model
 *   follows the same rule). The sim engine is such a model too.
 * - `chosen`: llama-server's slots (and the sim engine's), the slot chosen
 *   by the node and sent as `id_slot` (SPEC 9.6, "Slot choice": the slot
 *   this prompt continues, else the idle one worth least; the rule is passed
 *   in as `choose`, route/slots.ts), so the model is exact. With a host-RAM
 *   prompt cache (today's llama-server `--cache-ram`, the sim's `cache_ram`;
 *   option `pool`) it also keeps what the engine saves to RAM when a slot is
 *   taken, restores from there, and drops (prompt/ram-pool.ts).
 * - `lifo`: the embedded engine's context sequences: the one freed last is
 *   handed out first (engines/embedded-server.ts), exact.
 * - `blocks`: a shared block cache (vLLM-like `openai` engines, block-cache.ts): every link
 *   costs its own tokens of a budget, least recently used out.
 *
 * Pure: no I/O, no clock (recency is a counter the caller passes in), so
 * table tests drive it. Hashes are what prompt/held.ts calls chain links.
 */
import { continuesInPlace, type ChainLink, type PrefixChain, type SlotHold, type SlotView } from '../prompt/held.ts';
import { RamPool, savesSlot, TODAY_SIMILARITY, type PromptMeasure } from '../prompt/ram-pool.ts';
import { BlockCache } from './block-cache.ts';
import { chainTokensHeld, heldOf, holding, isMiss, prefixUpTo, ReplyCredit, sampledIndices, scaleChain, withReply } from './cache-chain.ts';
import { TurnCount } from './turn-count.ts';

export { heldOf, isMiss, ReplyCredit, sampledIndices, scaleChain, withReply } from './cache-chain.ts';

export type CacheModelKind = 'llama' | 'chosen' | 'lifo' | 'blocks';

/** llama-server's `--slot-prompt-similarity` default. */
export const DEFAULT_SIMILARITY = 0.5;

export interface CacheModelOptions {
  kind: CacheModelKind;
  /** Slots (parallel) of the backend. */
  slots: number;
  /** llama-server's --slot-prompt-similarity (llama, chosen). */
  similarity?: number;
  /** blocks: the tokens the cache holds at most (default: slots × context). */
  budgetTokens?: number;
  /** chosen: the node's slot choice (route/slots.ts chooseSlot); default: llama-server's own rule. */
  choose?: SlotChooser;
  /** chosen: told the gap (ms) between the end of a conversation's turn and its next turn taking the same slot. */
  onGap?: (ms: number) => void;
  /** chosen: told the turns of every placement's conversation (1: a new one; engines/turn-count.ts, route/slots.ts TurnGaps). */
  onPlaced?: (turns: number) => void;
  /**
   * chosen: the engine's host-RAM prompt cache (today's llama-server `--cache-ram`, the sim's `cache_ram`), read at
   * every request (the backend learns it when it starts); undefined or 0 tokens: none, a prompt lives only in its slot.
   */
  pool?: () => PoolSettings | undefined;
}

/** A backend's RAM pool as the cache model needs it. */
export interface PoolSettings {
  /** Its size in the engine's tokens (MiB × 2^20 ÷ the model's state bytes per token); Infinity: no limit. */
  readonly tokens: number;
  /** `--cache-idle-slots`: every idle slot is copied to RAM when a task starts. */
  readonly idleSlots?: boolean;
  /** `--slot-prompt-similarity` (today's default 0.1). */
  readonly similarity?: number;
}

/** One free-or-busy slot as the node's slot choice sees it for one prompt. */
type ChooserSlot = SlotView;

/** What taking a slot destroyed: its prompt's tokens no other slot holds, how long its conversation was idle, the chance it returns. */
export interface Evicted {
  readonly tokens: number;
  readonly idleMs: number;
  readonly chance: number;
  /** The re-prefills the eviction sets off (route/slots.ts cascadeOf); absent: one. */
  readonly cascade?: number;
  /** The prompt moved to the RAM pool: its conversation comes back by a restore, not a re-prefill. */
  readonly pooled?: boolean;
  /** Expected tokens of prompts the RAM pool drops to make room (each times the chance its conversation returns). */
  readonly dropped?: number;
}

/** The node's slot choice: the index of the slot to take and what that evicts, undefined when none is free. */
export type SlotChooser = (slots: readonly ChooserSlot[], named?: number) => { readonly index: number; readonly evicted?: Evicted } | undefined;

/** What the engine said about one request when it ended. */
export interface CacheOutcome {
  /** The prompt was processed (an answer came); false: abandoned, the slot keeps what it reused. */
  processed: boolean;
  /** The engine's prompt tokens (usage.prompt_tokens). */
  promptTokens?: number;
  /** The engine's cached tokens (cached_tokens, cache_n, or prompt tokens − prompt_n). */
  cachedTokens?: number;
  /**
   * The link the assistant's reply adds to the prompt's chain (prompt/reply.ts), in the chain's tokens: the
   * engine holds what it generated after the prompt, and a client's next turn echoes it.
   */
  reply?: ChainLink;
}

/** One request between begin and finish. */
export interface CacheTicket {
  /** The slot it runs in (slot kinds); for `chosen` the node sends it as `id_slot`. */
  readonly slot?: number;
  /** The tokens the model expects the engine to reuse. */
  readonly predicted: number;
  readonly chain: PrefixChain;
  /** Index in `chain` of its head link (tools and system), when known. */
  readonly head?: number;
  /** What the node's slot choice destroyed to run it (chosen kind); undefined: nothing of worth. */
  readonly evicted?: Evicted;
  /** The prediction reached through a recorded reply: from the prompt's end to the reply's (tokens). */
  readonly through?: { readonly from: number; readonly to: number };
  /** Of `predicted`, tokens the engine restores from its RAM pool (not held by the slot). */
  readonly restored?: number;
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
  /**
   * A request starts (it holds a slot of this backend): where it runs and
   * what the engine will reuse. `now` is the caller's recency counter, `ms`
   * its clock (slots' idle times).
   */
  /** `named`: the slot the request's entry priced, which the node's chooser takes when it costs no more (route/slots.ts). */
  /** `session`: the request carries a session key (its client says the conversation comes back). */
  begin(chain: PrefixChain, now: number, ms?: number, head?: number, named?: number, session?: boolean): CacheTicket;
  /** It ended: the engine's own counts correct the model. */
  finish(t: CacheTicket, o: CacheOutcome, now: number, ms?: number): void;
  /**
   * The node-chosen kind: what `begin` would evict for `chain` at `ms`, changing nothing (the executor weighs it
   * against what a forward's entry priced before it takes the slot); undefined when nothing of worth, or not told.
   */
  peek?(chain: PrefixChain, ms: number, named?: number): Evicted | undefined;
  /** What is held, most recently used first (a hash at most once). */
  held(): HeldLink[];
  /** Slot kinds: each slot's state (SPEC section 7, "Slot state"), idleSince on the caller's clock. */
  slotStates?(): SlotHold[];
  /**
   * The blocks kind: every held link's tokens by hash, the same map kept up
   * to date as requests come and go (what `held()` lists, without its order),
   * so this node's own routing reads it without rebuilding a digest.
   */
  liveHeld?(): ReadonlyMap<string, number>;
  /** With a RAM pool: the links of the prompts it holds, most recently saved first (sampled as a slot's are); undefined: no pool. */
  ramHeld?(): HeldLink[] | undefined;
  /** Slot kinds: what each idle slot holding a prompt holds, to be kept with the slot's saved file (survive/slot-store.ts). */
  slotContents?(): SlotContent[];
  /** Slot kinds: the engine restored `content` into slot `slot` (a saved file read back); the model now believes it. */
  restored?(slot: number, content: SlotContent, ms: number): void;
  /**
   * With a RAM pool: the engine saved idle slot `slot`'s prompt to RAM and the slot holds nothing of worth (the node
   * asked it to, before a restore overwrites the slot: survive/slot-ram.ts). False when there is no pool or the slot is busy.
   */
  parked?(slot: number): boolean;
  /** With a RAM pool: what it holds, as slot contents (`slot` -1), most recently saved first. */
  pooledContents?(): SlotContent[];
  /**
   * With a RAM pool: the engine took the entry whose prompt ends at link `hash` back into idle slot `slot` (saving the
   * slot's own prompt to RAM first) and ran that prompt again: the slot holds its prompt, not its reply. False when
   * the model knows no such entry.
   */
  recalled?(slot: number, hash: string, ms: number): SlotContent | undefined;
}

/** What one slot holds, as it is written beside a saved slot file and read back when the file is restored. */
export interface SlotContent {
  readonly slot: number;
  /** Its prompt's links, then the reply's, in the engine's tokens. */
  readonly links: PrefixChain;
  /** How many of `links` are the prompt's. */
  readonly promptLinks: number;
  /** Index of the prompt's head link; -1: unknown. */
  readonly head: number;
  readonly replyFull?: number;
  /** When its last request ended (the node's clock, ms), when known: which conversations are most recent. */
  readonly idleSince?: number;
}

export function cacheModel(opts: CacheModelOptions): CacheModel {
  return opts.kind === 'blocks' ? new BlockCache(opts.budgetTokens ?? Infinity) : new SlotCache(opts.kind, Math.max(1, opts.slots), opts.similarity ?? DEFAULT_SIMILARITY, opts.choose, opts.onGap, opts.pool, opts.onPlaced);
}

interface Slot {
  readonly id: number;
  busy: boolean;
  /** What it holds: its prompt's links, then (once answered) the reply's. */
  links: PrefixChain;
  /** How many of `links` are the prompt's: a request continues the slot when its chain has the last of them. */
  promptLinks: number;
  /** Index in `links` of the prompt's head link (-1: unknown). */
  head: number;
  /** The reply's tokens before ReplyCredit (what the engine would reuse of it in full), when it holds one. */
  replyFull?: number;
  hashes: Map<string, number>;
  /** When it was last taken (0: never). */
  taken: number;
  /** When it was last given back (0: never), for the lifo pool. */
  freed: number;
  /** The caller's clock (ms) when it was last given back (undefined: never). */
  freedMs?: number;
  /**
   * Turns of the conversation it holds, on this backend (engines/turn-count.ts; route/slots.ts prices a return by
   * them); 0: not counted, priced as sure to return (a session's, which its client says will come back; a restored one).
   */
  turns: number;
}

/** A chain that reaches through the reply slot `s` holds: from its prompt's end to the reply's, in the engine's tokens. */
function replyMet(s: Slot, chain: PrefixChain): { from: number; to: number } | undefined {
  const end = promptEnd(s);
  const reply = s.links.length > s.promptLinks ? s.links[s.promptLinks] : undefined;
  if (!end || !reply || !chain.some((l) => l.hash === reply.hash)) return undefined;
  // The full estimate, not the credited one: a share learned low can still learn back.
  return { from: end.tokens, to: s.replyFull ?? reply.tokens };
}

/** The last link of the prompt a slot holds (before any reply); undefined when it is empty. */
function promptEnd(s: Slot): ChainLink | undefined {
  return s.promptLinks > 0 ? s.links[s.promptLinks - 1] : undefined;
}

/** What a slot holds, as the RAM pool keeps it: moved out of a slot and back into one unchanged. */
interface Content {
  readonly links: PrefixChain;
  readonly promptLinks: number;
  readonly head: number;
  readonly replyFull?: number;
  readonly hashes: ReadonlyMap<string, number>;
  /** When its conversation's last turn ended (the caller's clock). */
  readonly freedMs?: number;
  /** A request's own estimate of its tokens in the engine's count (a request, not yet a slot's content). */
  readonly est?: number;
  /** Turns of its conversation (Slot.turns). */
  readonly turns?: number;
}

/** Contents compared as the engine compares token sequences: by the deepest chain link they share (in `a`'s tokens). */
const CONTENT: PromptMeasure<Content> = {
  tokens: (c) => c.est ?? (c.links.length ? c.links[c.links.length - 1].tokens : 0),
  common: (a, b) => heldOf(b.links, a.hashes),
};

function contentOf(s: Slot): Content {
  return { links: s.links, promptLinks: s.promptLinks, head: s.head, hashes: s.hashes, turns: s.turns, ...(s.replyFull !== undefined ? { replyFull: s.replyFull } : {}), ...(s.freedMs !== undefined ? { freedMs: s.freedMs } : {}) };
}

/** A pooled or slot content as it is written beside a slot file (slot -1: it is in RAM). */
function contentAsSlot(c: Content, slot: number): SlotContent {
  return { slot, links: c.links, promptLinks: c.promptLinks, head: c.head, ...(c.replyFull !== undefined ? { replyFull: c.replyFull } : {}), ...(c.freedMs !== undefined ? { idleSince: c.freedMs } : {}) };
}

/** A request as the pool compares it: its chain, its length in the engine's tokens estimated by `ratio`. */
function requestContent(chain: PrefixChain, ratio: number): Content {
  const last = chain.length ? chain[chain.length - 1].tokens : 0;
  return { links: chain, promptLinks: chain.length, head: -1, hashes: holding(chain), est: Math.round(last * ratio) };
}

class SlotCache implements CacheModel {
  readonly slots: Slot[];
  changes = 0;
  readonly #credit = new ReplyCredit();
  /** The turns of the conversations placed here, whichever slot they took (route/slots.ts prices returns by them). */
  readonly #turnCount = new TurnCount();

  constructor(
    readonly kind: 'llama' | 'chosen' | 'lifo',
    n: number,
    private readonly similarity: number,
    private readonly choose?: SlotChooser,
    private readonly onGap?: (ms: number) => void,
    private readonly poolSettings?: () => PoolSettings | undefined,
    private readonly onPlaced?: (turns: number) => void,
  ) {
    this.slots = Array.from({ length: n }, (_, id) => ({ id, busy: false, links: [], promptLinks: 0, head: -1, hashes: new Map(), taken: 0, freed: 0, turns: 0 }));
  }

  /** Tokens of slot `s`'s prompt that no other slot holds (what taking it destroys at most). */
  #unique(s: Slot): number {
    const tokens = s.links.length ? s.links[s.links.length - 1].tokens : 0;
    let shared = 0;
    for (const o of this.slots) if (o !== s && o.links.length) shared = Math.max(shared, heldOf(s.links, o.hashes));
    return Math.max(0, tokens - shared);
  }

  /** The RAM pool (chosen kind, when the backend has one); made at its first use. */
  #ram: RamPool<Content> | undefined;
  /** The engine's tokens per chain token, from the last answer (a request's length in the engine's count before it runs). */
  #ratio = 1;

  /** The pool now, its limit as the backend last said; undefined when the backend has none. */
  #pool(): { pool: RamPool<Content>; settings: PoolSettings } | undefined {
    if (this.kind !== 'chosen') return undefined;
    const settings = this.poolSettings?.();
    if (!settings || !(settings.tokens > 0)) return undefined;
    this.#ram ??= new RamPool<Content>(CONTENT, settings.tokens);
    this.#ram.limitTokens = settings.tokens;
    return { pool: this.#ram, settings };
  }

  /** What the last #chosen pick evicted (read by begin). */
  #evicted: Evicted | undefined;

  /** The node's choice: every slot as the chooser sees it for this prompt. */
  #chosen(chain: PrefixChain, ms: number, choose: SlotChooser, named?: number): Slot | undefined {
    const views = this.#views(chain, ms);
    const pick = choose(views, named);
    this.#evicted = pick?.evicted;
    if (!pick) return undefined;
    const slot = this.slots[pick.index];
    const v = views[pick.index];
    if (continuesInPlace(v.tokens, v.shared, v.head) && slot.freedMs !== undefined) this.onGap?.(ms - slot.freedMs);
    return slot;
  }

  peek(chain: PrefixChain, ms: number, named?: number): Evicted | undefined {
    if (this.kind !== 'chosen' || !this.choose) return undefined;
    return this.choose(this.#views(chain, ms), named)?.evicted;
  }

  #views(chain: PrefixChain, ms: number): ChooserSlot[] {
    const ram = this.#pool();
    const request = ram && requestContent(chain, this.#ratio);
    return this.slots.map((s): ChooserSlot => {
      const end = promptEnd(s);
      const tokens = end?.tokens ?? 0;
      // This prompt continues the slot's when the slot's prompt's last link is in its chain (chained hashes: the
      // whole prefix); it then reuses that, and the reply too when the client echoed it as it came.
      const shared = heldOf(chain, s.hashes);
      const unique = tokens > 0 ? this.#unique(s) : 0;
      // Its head's tokens tell a conversation grown inside its last message from another sharing only the system prompt.
      const head = s.head >= 0 && s.head < s.promptLinks ? { head: s.links[s.head].tokens } : {};
      if (s.busy) return { busy: true, tokens, shared, unique, ...head };
      const view: ChooserSlot = { busy: false, tokens, shared, unique, ...head, idleMs: Math.max(0, ms - (s.freedMs ?? ms)), ...(tokens > 0 && s.turns > 0 ? { turns: s.turns } : {}) };
      return ram && request ? Object.assign(view, this.#poolView(s, request, ram.pool, ram.settings, ms)) : view;
    });
  }

  /** Taking idle slot `s` for `request` on a backend with a RAM pool: is its prompt saved, what comes back, what the save drops. */
  #poolView(s: Slot, request: Content, pool: RamPool<Content>, settings: PoolSettings, ms: number): Pick<ChooserSlot, 'pooled' | 'restore' | 'drops'> {
    if (s.links.length === 0) return { pooled: false, restore: 0 };
    const own = contentOf(s);
    const last = s.links[s.links.length - 1].tokens;
    if (!savesSlot(last, CONTENT.common(own, request), CONTENT.tokens(request), settings.similarity ?? TODAY_SIMILARITY)) return { pooled: false, restore: 0 };
    const dropped = pool.wouldDrop(own);
    // Saved unless larger than the whole pool (then its conversation is lost as before).
    const pooled = last <= pool.limitTokens;
    const i = pool.best(own, request);
    const restore = i >= 0 ? CONTENT.common(pool.entries[i].prompt, request) : 0;
    const drops = dropped.map((e) => ({ tokens: e.tokens, idleMs: Math.max(0, ms - (e.prompt.freedMs ?? ms)), ...(e.prompt.turns ? { turns: e.prompt.turns } : {}) }));
    return drops.length ? { pooled, restore, drops } : { pooled, restore };
  }

  /** The free slot a request with `chain` gets, by the engine's rule; undefined when every slot is busy. */
  #choose(chain: PrefixChain, ms: number, named?: number): Slot | undefined {
    const free = this.slots.filter((s) => !s.busy);
    if (free.length === 0) return undefined;
    if (this.kind === 'chosen' && this.choose) return this.#chosen(chain, ms, this.choose, named);
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

  begin(chain: PrefixChain, now: number, ms = 0, head?: number, named?: number, session?: boolean): CacheTicket {
    this.#evicted = undefined;
    const slot = this.#choose(chain, ms, named);
    // More requests than modelled slots (the engine queues them): predicted cold, nothing changes.
    const h = head !== undefined && head >= 0 && head < chain.length ? { head } : {};
    if (!slot) return { predicted: 0, chain, ...h };
    const evicted = this.#evicted;
    const restored = this.#swap(slot, chain);
    const predicted = heldOf(chain, slot.hashes);
    const turns = this.#turnCount.next(chain, h.head);
    // A session's turns are not counted in the shares: the shares price the slots of conversations without one.
    slot.turns = session ? 0 : turns;
    if (this.kind === 'chosen' && !session) this.onPlaced?.(turns);
    const through = replyMet(slot, chain);
    slot.busy = true;
    slot.taken = now;
    // While it runs the slot is already the new prompt's: a related request routed meanwhile finds it here.
    this.#hold(slot, chain, chain.length, h.head);
    this.#saveIdle();
    const fromRam = restored ? { restored: predicted } : {};
    return { slot: slot.id, predicted, chain, ...h, ...(evicted ? { evicted } : {}), ...(through ? { through } : {}), ...fromRam };
  }

  /**
   * What the engine does to the RAM pool as it takes `slot` for `chain` (ram-pool.ts): the slot's prompt saved when
   * it keeps under half of it, and the entry that suits this prompt better moved back into the slot. True when one was.
   */
  #swap(slot: Slot, chain: PrefixChain): boolean {
    const ram = this.#pool();
    if (!ram || slot.links.length === 0) return false;
    const before = ram.pool.entries.length;
    const took = ram.pool.take(contentOf(slot), requestContent(chain, this.#ratio), ram.settings.similarity ?? TODAY_SIMILARITY);
    if (took.saved || took.dropped.length || before !== ram.pool.entries.length) this.changes++;
    if (!took.restored || !took.slot) return false;
    const c = took.slot;
    this.#hold(slot, c.links, c.promptLinks, c.head >= 0 ? c.head : undefined);
    if (c.replyFull !== undefined) slot.replyFull = c.replyFull;
    return true;
  }

  /** `--cache-idle-slots`: when a task starts, every idle slot's prompt is copied to RAM (the slot keeps it too). */
  #saveIdle(): void {
    const ram = this.#pool();
    if (!ram?.settings.idleSlots) return;
    const entries = ram.pool.entries;
    for (const s of this.slots) {
      if (s.busy || s.links.length === 0) continue;
      const [n, last] = [entries.length, entries.at(-1)];
      ram.pool.save(contentOf(s));
      if (entries.length !== n || entries.at(-1) !== last) this.changes++;
    }
  }

  finish(t: CacheTicket, o: CacheOutcome, now: number, ms = 0): void {
    if (t.slot === undefined) return;
    const slot = this.slots[t.slot];
    slot.busy = false;
    slot.freed = now;
    slot.freedMs = ms;
    const chain = scaleChain(t.chain, o.promptTokens);
    const own = t.chain.length ? t.chain[t.chain.length - 1].tokens : 0;
    if (o.promptTokens !== undefined && o.promptTokens > 0 && own > 0) this.#ratio = o.promptTokens / own;
    const reused = o.cachedTokens ?? t.predicted;
    if (t.through && o.cachedTokens !== undefined && o.processed) this.#credit.observe(t.through.from, t.through.to, o.cachedTokens);
    // Abandoned during prefill: the slot keeps what it reused; else the whole prompt, in the engine's tokens, and
    // the reply it generated.
    if (o.processed) {
      const held = withReply(chain, t.chain, o, this.#credit.share);
      this.#hold(slot, held, chain.length, t.head);
      if (held.length > chain.length) slot.replyFull = withReply(chain, t.chain, o).at(-1)!.tokens;
    } else {
      const kept = prefixUpTo(chain, reused);
      this.#hold(slot, kept, kept.length, t.head !== undefined && t.head < kept.length ? t.head : undefined);
    }
    if (o.cachedTokens !== undefined && this.kind !== 'lifo' && isMiss(t.predicted, o.cachedTokens, o.promptTokens ?? 0)) {
      // The engine did not reuse what the model expected: it placed the request elsewhere, or the rule differed,
      // or (told its slot) it lost what the slot held without the node seeing it (a restart between health
      // checks, an erase). Whatever else the model believes deeper than the engine's count for this prompt is
      // doubtful.
      // A slot the node named, expected to share a prefix with this prompt, that the engine found empty (not even the
      // template's first tokens reused) lost its cache: an erase or a restart, which empties every slot. What the model
      // believes the other idle slots hold is forgotten too, so the next placements are not priced on it.
      const lost = this.kind === 'chosen' && t.predicted > 0 && o.cachedTokens === 0;
      for (const s of this.slots) if (s !== slot && !s.busy && (lost ? s.links.length > 0 : heldOf(t.chain, s.hashes) > o.cachedTokens)) this.#hold(s, []);
      // The RAM pool is the engine's too: a restart empties it, and an entry believed deeper than the count is doubtful.
      const ram = this.#ram;
      if (ram) {
        const keep = ram.entries.filter((e) => !lost && heldOf(t.chain, e.prompt.hashes) <= o.cachedTokens!);
        if (keep.length !== ram.entries.length) {
          ram.entries.length = 0;
          ram.entries.push(...keep);
          this.changes++;
        }
      }
    }
  }

  #hold(slot: Slot, links: PrefixChain, promptLinks = links.length, head?: number): void {
    slot.links = links;
    slot.promptLinks = promptLinks;
    slot.head = head ?? -1;
    slot.replyFull = undefined;
    slot.hashes = holding(links);
    this.changes++;
  }

  slotContents(): SlotContent[] {
    return this.slots
      .filter((s) => !s.busy && s.promptLinks > 0)
      .map((s) => ({ slot: s.id, links: s.links, promptLinks: s.promptLinks, head: s.head, ...(s.replyFull !== undefined ? { replyFull: s.replyFull } : {}), ...(s.freedMs !== undefined ? { idleSince: s.freedMs } : {}) }));
  }

  restored(slot: number, c: SlotContent, ms: number): void {
    const s = this.slots[slot];
    if (!s || s.busy) return;
    this.#hold(s, c.links, Math.min(c.promptLinks, c.links.length), c.head >= 0 && c.head < c.promptLinks ? c.head : undefined);
    if (c.replyFull !== undefined) s.replyFull = c.replyFull;
    // Idle since it was restored: its conversation's next turn is counted as any other's.
    s.freedMs = ms;
    s.turns = 0;
  }

  parked(slot: number): boolean {
    const s = this.slots[slot];
    const ram = this.#pool();
    if (!s || s.busy || !ram) return false;
    if (s.links.length) ram.pool.save(contentOf(s));
    this.#hold(s, []);
    return true;
  }

  pooledContents(): SlotContent[] {
    const entries = this.#pool() ? this.#ram!.entries : [];
    return entries
      .filter((e) => e.prompt.promptLinks > 0)
      .map((e) => contentAsSlot(e.prompt, -1))
      .reverse();
  }

  recalled(slot: number, hash: string, ms: number): SlotContent | undefined {
    const s = this.slots[slot];
    const ram = this.#pool();
    if (!s || s.busy || !ram) return undefined;
    const i = ram.pool.entries.findIndex((e) => e.prompt.promptLinks > 0 && e.prompt.links[e.prompt.promptLinks - 1].hash === hash);
    if (i < 0) return undefined;
    const [e] = ram.pool.entries.splice(i, 1);
    if (s.links.length) ram.pool.save(contentOf(s));
    const c = e.prompt;
    this.#hold(s, c.links.slice(0, c.promptLinks), c.promptLinks, c.head >= 0 && c.head < c.promptLinks ? c.head : undefined);
    s.freedMs = c.freedMs ?? ms;
    s.turns = c.turns ?? 0;
    return contentAsSlot(contentOf(s), slot);
  }

  slotStates(): SlotHold[] {
    return this.slots.map((s) => {
      // The link its prompt ends at (SPEC 7): an entry tells a continuation by it, whatever became of the reply.
      const last = promptEnd(s);
      const unique = last ? this.#unique(s) : 0;
      const head = s.head >= 0 && s.head < s.promptLinks - 1 ? { head: s.links[s.head] } : {};
      // The link before the last, past the head: a prompt grown inside this one's last message still continues it.
      const prev = head.head && s.head < s.promptLinks - 2 ? { prev: s.links[s.promptLinks - 2] } : {};
      if (s.busy) return last ? { last, ...head, ...prev, unique, busy: true } : { unique, busy: true };
      const idle = s.freedMs !== undefined ? { idleSince: s.freedMs } : {};
      return last ? { last, ...head, ...prev, unique, busy: false, ...idle, ...(s.turns > 0 ? { turns: s.turns } : {}) } : { unique, busy: false, ...idle };
    });
  }

  ramHeld(): HeldLink[] | undefined {
    if (!this.#pool()) return undefined;
    const entries = this.#ram!.entries;
    const seen = new Set<string>();
    const out: HeldLink[] = [];
    // Newest first; `used` is the entry's place in the pool (higher: saved later, dropped later).
    for (let k = entries.length - 1; k >= 0; k--) {
      const links = entries[k].prompt.links;
      for (const i of sampledIndices(links.length)) {
        const l = links[i];
        if (seen.has(l.hash)) continue;
        seen.add(l.hash);
        out.push({ hash: l.hash, tokens: l.tokens, used: k });
      }
    }
    return out;
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
