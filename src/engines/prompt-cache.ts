/**
 * The sim engine's prompt cache: a model of llama-server's slots with
 * `cache_prompt`. Each slot remembers the text it last processed (the prompt
 * of its last request and what it generated); a new request reuses the
 * longest common prefix with the slot it gets and pays prefill only for the
 * rest. Pure: no I/O, no clock (recency is a counter), so routing tests and
 * benchmarks can compute the same figures the engine reports.
 *
 * Tokens are a cheap deterministic stand-in for a tokenizer: every
 * CHARS_PER_TOKEN characters of the rendered prompt make one token. A prompt
 * of n characters costs O(n) work at most once per free slot, compared in
 * blocks, so a 1 MB prompt costs a few milliseconds.
 *
 * With `ram` (config `sim.cache_ram`) the pool also keeps today's
 * llama-server's host-RAM prompt cache (prompt/ram-pool.ts) and picks slots
 * by today's rule; without it, build 4748's behaviour.
 */
import { renderChat } from '../prompt/canonical.ts';
import { chatSegments, completionText } from '../prompt/segments.ts';
import { CHARS_PER_TOKEN, estimateTokens, tokensIn } from '../prompt/tokens.ts';
import { RamPool, TODAY_SIMILARITY, type PromptMeasure } from '../prompt/ram-pool.ts';

/** Characters of rendered prompt per simulated token: the prefix chain's, so its links count the tokens this cache reuses. */
export { CHARS_PER_TOKEN };

/**
 * llama-server's `--slot-prompt-similarity` default: a free slot is chosen
 * for its cached prefix only when that prefix covers more than this share of
 * the new prompt; otherwise the least recently used free slot is taken.
 */
export const DEFAULT_SLOT_PROMPT_SIMILARITY = 0.5;

/**
 * The text a model would see, as a chat template renders it — the prefix
 * chain's canonical text (src/prompt/), so the chain's links
 * and this cache agree on what a prompt's first messages are and how many
 * tokens they hold: each message as `<|role|>\ncontent\n` (tool calls
 * after the content), the tools (one `<|tools|>` segment each) right after
 * the leading system message(s), then the assistant's opening; for completions, the prompt. undefined when the body
 * has no messages (chat) or prompt (completions).
 */
export function renderPrompt(chat: boolean, body: Record<string, unknown>): string | undefined {
  if (chat) {
    const segments = chatSegments(body);
    return segments && renderChat(segments);
  }
  return completionText(body);
}

/** Simulated tokens in a text (at least one, as every prompt has a start). */
export function tokenCount(text: string): number {
  return estimateTokens(text.length);
}

const BLOCK = 1024;

/** Length in characters of the common prefix of a and b; compares in blocks, then characters. */
export function commonPrefixChars(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i + BLOCK <= n && a.substring(i, i + BLOCK) === b.substring(i, i + BLOCK)) i += BLOCK;
  while (i < n && a.charCodeAt(i) === b.charCodeAt(i)) i++;
  return i;
}

/** Whole simulated tokens that two texts share from their start. */
export function commonPrefixTokens(a: string, b: string): number {
  return tokensIn(commonPrefixChars(a, b));
}

/**
 * Tokens of `prompt` a slot holding `cached` can skip: the common prefix,
 * less one when it covers the whole prompt (llama-server always evaluates
 * the last prompt token again to get its logits).
 */
export function reusableTokens(cached: string, prompt: string): number {
  return Math.min(commonPrefixTokens(cached, prompt), tokenCount(prompt) - 1);
}

/** What the pool knows of one slot. */
export interface SlotState {
  readonly id: number;
  /** Serving a request now. */
  busy: boolean;
  /** The text the slot processed last (prompt, then what it generated); '' when never used. */
  text: string;
  /** Recency: the pool's counter when the slot was last taken (0: never). */
  lastUsed: number;
}

/** The slot a request gets, and how many of its prompt tokens that slot already holds. */
export interface SlotChoice {
  readonly slot: number;
  readonly cachedTokens: number;
}

/**
 * llama-server's choice among free slots: the one whose cached text shares
 * the longest prefix with the prompt, provided that prefix is more than
 * `similarity` of the prompt's tokens (ties to the least recently used);
 * else the least recently used free slot (never used counts as oldest, then
 * lowest id). undefined when no slot is free. `cache: false` (the request's
 * `cache_prompt: false`, or the cache switched off) still picks a slot the
 * same way but reuses nothing.
 */
export function chooseSlot(slots: readonly SlotState[], prompt: string, opts: { similarity?: number; cache?: boolean; today?: boolean } = {}): SlotChoice | undefined {
  return chooseSlotBy(slots, prompt, opts)?.choice;
}

/**
 * chooseSlot, and whether the pick was least recently used. `today`: today's
 * llama-server's rule (similarity 0.1 by default, the first of the best
 * shares, least recently used ties to the highest id) instead of b4748's.
 */
export function chooseSlotBy(slots: readonly SlotState[], prompt: string, opts: { similarity?: number; cache?: boolean; today?: boolean } = {}): { choice: SlotChoice; lru: boolean } | undefined {
  const today = opts.today === true;
  const similarity = opts.similarity ?? (today ? TODAY_SIMILARITY : DEFAULT_SLOT_PROMPT_SIMILARITY);
  const total = tokenCount(prompt);
  let best: SlotState | undefined;
  let bestTokens = 0;
  let lru: SlotState | undefined;
  for (const s of slots) {
    if (s.busy) continue;
    if (!lru || s.lastUsed < lru.lastUsed || (today && s.lastUsed === lru.lastUsed)) lru = s;
    if (s.text.length === 0) continue;
    const shared = commonPrefixTokens(s.text, prompt);
    if (shared === 0 || shared / total <= similarity) continue;
    if (!best || shared > bestTokens || (!today && shared === bestTokens && s.lastUsed < best.lastUsed)) {
      best = s;
      bestTokens = shared;
    }
  }
  const slot = best ?? lru;
  if (!slot) return undefined;
  const cachedTokens = opts.cache === false ? 0 : reusableTokens(slot.text, prompt);
  return { choice: { slot: slot.id, cachedTokens }, lru: !best };
}

/** Texts compared as the sim's tokens: CHARS_PER_TOKEN characters each. */
const TEXT: PromptMeasure<string> = { tokens: (t) => tokenCount(t), common: (a, b) => commonPrefixTokens(a, b) };

/** A slot held by one request; `finish` gives it back with what it now holds. */
export interface SlotLease extends SlotChoice {
  /** Prompt tokens in all (cached and to process). */
  readonly promptTokens: number;
  /**
   * Give the slot back. `processed`: whether the prompt was processed (the
   * slot then holds the prompt and `generated`); when not (the request was
   * abandoned during prefill) the slot keeps only the prefix it reused.
   */
  finish(processed: boolean, generated?: string): void;
}

/**
 * `parallel` slots with their cached text, and a FIFO of requests waiting
 * for one (llama-server queues what it cannot start).
 */
export class SlotPool {
  readonly slots: SlotState[];
  #clock = 0;
  #waiting: { prompt: string; cache: boolean; idSlot?: number; resolve: (l: SlotLease) => void }[] = [];

  /** Today's llama-server's host-RAM prompt cache (`ram` tokens), when the pool has one. */
  readonly ram: RamPool<string> | undefined;

  /**
   * `ram`: a host-RAM prompt cache of that many tokens (today's llama-server's `--cache-ram`, ram-pool.ts; 0 or
   * absent: none, a prompt lives only in its slot). With one the pool also picks slots by today's rule (LCP share of
   * the request over 0.1, least recently used ties to the highest id), idle slots not copied (`--no-cache-idle-slots`).
   */
  constructor(
    parallel: number,
    readonly opts: { similarity?: number; cache?: boolean; ram?: number } = {},
  ) {
    this.slots = Array.from({ length: Math.max(1, parallel) }, (_, id) => ({ id, busy: false, text: '', lastUsed: 0 }));
    this.ram = opts.ram && opts.ram > 0 ? new RamPool<string>(TEXT, opts.ram) : undefined;
  }

  /** Requests waiting for a slot. */
  get queued(): number {
    return this.#waiting.length;
  }

  /**
   * A slot for `prompt`, now or once one frees (in arrival order); undefined
   * if `signal` aborts first. `cache: false` reuses nothing (per request).
   * `idSlot` (llama-server's `id_slot`, in range): that slot, once it is
   * free, instead of the engine's own choice.
   */
  acquire(prompt: string, signal?: AbortSignal, cache = true, idSlot?: number): Promise<SlotLease | undefined> {
    if (signal?.aborted) return Promise.resolve(undefined);
    const useCache = cache && this.opts.cache !== false;
    const named = idSlot !== undefined && Number.isInteger(idSlot) && idSlot >= 0 && idSlot < this.slots.length ? idSlot : undefined;
    if (this.#waiting.length === 0) {
      const now = this.#take(prompt, useCache, named);
      if (now) return Promise.resolve(now);
    }
    return new Promise((resolve) => {
      const onAbort = () => {
        const i = this.#waiting.indexOf(entry);
        if (i >= 0) this.#waiting.splice(i, 1);
        resolve(undefined);
      };
      const entry = {
        prompt,
        cache: useCache,
        idSlot: named,
        resolve: (lease: SlotLease) => {
          signal?.removeEventListener('abort', onAbort);
          resolve(lease);
        },
      };
      this.#waiting.push(entry);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  #take(prompt: string, cache: boolean, idSlot?: number): SlotLease | undefined {
    const today = this.ram !== undefined;
    const picked =
      idSlot === undefined
        ? chooseSlotBy(this.slots, prompt, { similarity: this.opts.similarity, cache, today })
        : this.slots[idSlot].busy
          ? undefined
          : { choice: { slot: idSlot, cachedTokens: cache ? reusableTokens(this.slots[idSlot].text, prompt) : 0 }, lru: false };
    if (!picked) return undefined;
    let choice = picked.choice;
    const slot = this.slots[choice.slot];
    if (this.ram && cache) {
      // The engine saves what the slot gives up to RAM and restores a better prompt from there into it.
      const took = this.ram.take(slot.text || undefined, prompt, this.opts.similarity ?? TODAY_SIMILARITY, picked.lru);
      if (took.restored && took.slot !== undefined) {
        slot.text = took.slot;
        choice = { slot: choice.slot, cachedTokens: reusableTokens(slot.text, prompt) };
      }
    }
    slot.busy = true;
    slot.lastUsed = ++this.#clock;
    const kept = slot.text.slice(0, choice.cachedTokens * CHARS_PER_TOKEN);
    slot.text = prompt;
    let done = false;
    return {
      ...choice,
      promptTokens: tokenCount(prompt),
      finish: (processed, generated = '') => {
        if (done) return;
        done = true;
        slot.text = processed ? prompt + generated : kept;
        slot.busy = false;
        this.#drain();
      },
    };
  }

  /**
   * Forget what slot `id` holds (llama-server's `POST /slots/{id}?action=erase`):
   * the tokens it held, or undefined when there is no such slot or it is
   * processing a request.
   */
  erase(id: number): number | undefined {
    const slot = this.slots[id];
    if (!slot || slot.busy) return undefined;
    const n = slot.text.length ? tokenCount(slot.text) : 0;
    slot.text = '';
    return n;
  }

  /** Waiters in arrival order take what frees; one waiting for a named busy slot does not hold up the others. */
  #drain(): void {
    for (let i = 0; i < this.#waiting.length; ) {
      const w = this.#waiting[i];
      const lease = this.#take(w.prompt, w.cache, w.idSlot);
      if (!lease) {
        if (w.idSlot === undefined) return;
        i++;
        continue;
      }
      this.#waiting.splice(i, 1);
      w.resolve(lease);
    }
  }
}
