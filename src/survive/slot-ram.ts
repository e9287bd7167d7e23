/**
 * A slot's prompt in and out of the engine's host-RAM prompt cache (today's
 * llama-server `--cache-ram`, SPEC section 13), at the node's asking.
 *
 * The engine has no call for either; both ride on its own rule (prompt/ram-pool.ts):
 * a task that takes a slot keeping under half of its prompt saves that prompt to
 * RAM, and then moves back into the slot the RAM entry that suits the task better.
 * - `parkSlot`: a one-token completion named to the slot saves the slot's prompt
 *   to RAM and leaves the slot holding one token. A cache move or a drain's
 *   hand-off does this before it restores a file into a slot that holds another
 *   live conversation: the engine's restore overwrites a slot and saves nothing.
 * - `recallPrompt`: the engine body that last ran a prompt, sent again with one
 *   token to generate, brings that prompt back from RAM into the slot named (or
 *   prefills it there, when RAM no longer had it). A drain does this to hand off
 *   the conversations its slots had already given up to RAM.
 *
 * `PromptSources` keeps those bodies: the last engine body of each prompt, by
 * the chain link its prompt ends at, in memory only and within a byte bound
 * (they are the client's text: never written to disk, never sent anywhere but
 * back to the engine that ran them).
 */
import { postToEngine, type EnginePost } from './engine-post.ts';
import type { Backend } from '../engines/backend.ts';

/** The bytes of bodies kept at most (most recently run kept first). */
export const SOURCES_MAX_BYTES = 32 * 1024 * 1024;
/** One engine call of a park or a recall waits at most this. */
const CALL_MS = 20_000;

/** What ran a prompt on the engine: the path and the body as the executor sent them. */
export interface PromptSource {
  path: string;
  body: Buffer;
}

export class PromptSources {
  readonly #by = new Map<string, PromptSource>();
  #bytes = 0;

  constructor(private readonly maxBytes = SOURCES_MAX_BYTES) {}

  /** The prompt ending at chain link `hash` ran with `source` (it replaces an earlier one). */
  remember(hash: string, source: PromptSource): void {
    if (source.body.length > this.maxBytes) return;
    this.#drop(hash);
    this.#by.set(hash, source);
    this.#bytes += source.body.length;
    for (const [k, v] of this.#by) {
      if (this.#bytes <= this.maxBytes) break;
      this.#by.delete(k);
      this.#bytes -= v.body.length;
    }
  }

  get(hash: string): PromptSource | undefined {
    return this.#by.get(hash);
  }

  get bytes(): number {
    return this.#bytes;
  }

  #drop(hash: string): void {
    const old = this.#by.get(hash);
    if (!old) return;
    this.#by.delete(hash);
    this.#bytes -= old.body.length;
  }
}

type EngineBackend = Pick<Backend, 'authHeaders'>;

function post(b: EngineBackend, url: string, path: string, body: string | Buffer): Promise<EnginePost> {
  return postToEngine(b, url, path, body, CALL_MS);
}

/** Have the engine at `url` save slot `slot`'s prompt to its RAM pool (the slot is left holding a token or two). */
export async function parkSlot(b: EngineBackend, url: string, slot: number): Promise<{ ok: true } | { ok: false; why: string }> {
  const r = await post(b, url, '/completion', JSON.stringify({ prompt: '.', n_predict: 0, id_slot: slot, cache_prompt: true, temperature: 0 }));
  return r.ok ? { ok: true } : r;
}

/**
 * Run `source` again in slot `slot` with one token to generate: the engine takes the prompt back from RAM (or
 * prefills it) into the slot. Answers the prompt's tokens and how many the engine found cached.
 */
export async function recallPrompt(b: EngineBackend, url: string, slot: number, source: PromptSource): Promise<{ ok: true; prompt: number; cached: number } | { ok: false; why: string }> {
  let doc: Record<string, unknown>;
  try {
    doc = JSON.parse(source.body.toString('utf8')) as Record<string, unknown>;
  } catch {
    return { ok: false, why: 'its body is not JSON' };
  }
  if (!doc || typeof doc !== 'object' || Array.isArray(doc)) return { ok: false, why: 'its body is not a JSON object' };
  delete doc.stream_options;
  delete doc.n;
  Object.assign(doc, { stream: false, max_tokens: 1, n_predict: 1, id_slot: slot, cache_prompt: true });
  const r = await post(b, url, source.path, JSON.stringify(doc));
  if (!r.ok) return r;
  const usage = r.doc.usage as { prompt_tokens?: number; prompt_tokens_details?: { cached_tokens?: number } } | undefined;
  const timings = r.doc.timings as { cache_n?: number } | undefined;
  return { ok: true, prompt: Number(usage?.prompt_tokens) || 0, cached: Number(usage?.prompt_tokens_details?.cached_tokens ?? timings?.cache_n) || 0 };
}
