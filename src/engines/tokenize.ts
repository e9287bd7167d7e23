/**
 * Counting tokens with an engine's own tokenizer (count_tokens, SPEC
 * section 4): llama-server's `POST /tokenize`, which the embedded engine's
 * server answers too. The adapters that have a tokenizer implement
 * `Backend.countTokens` with it; count_tokens asks the first healthy backend
 * of the model that does.
 */
import { request } from 'undici';
import { engineAgent } from '../http/relay.ts';
import type { Backend } from './backend.ts';

/** A count that takes longer is given up (the caller falls back to the estimate). */
const TOKENIZE_TIMEOUT_MS = 10_000;

/** Tokens of `text` by `POST {base}/tokenize`; undefined when the engine answers anything but a token list. */
export async function tokenizeCount(base: string, headers: Record<string, string>, text: string, signal: AbortSignal): Promise<number | undefined> {
  const r = await request(`${base}/tokenize`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ content: text }),
    signal: AbortSignal.any([signal, AbortSignal.timeout(TOKENIZE_TIMEOUT_MS)]),
    dispatcher: engineAgent,
  });
  const doc = (await r.body.json().catch(() => undefined)) as { tokens?: unknown } | undefined;
  return r.statusCode === 200 && Array.isArray(doc?.tokens) ? doc.tokens.length : undefined;
}

/**
 * count_tokens's tokenizer for `model`: a healthy backend here serving it whose engine has one, else one whose
 * last health check failed (a busy engine on a loaded machine misses one now and then, and still counts: a
 * failed count falls back to the estimate); undefined: none.
 */
export function tokenizerFor(backends: readonly Backend[], model: string): ((text: string, signal: AbortSignal) => Promise<number | undefined>) | undefined {
  const can = (x: Backend) => x.info.model === model && x.url && x.countTokens;
  const b = backends.find((x) => can(x) && x.state === 'healthy') ?? backends.find((x) => can(x) && x.state === 'unhealthy');
  return b ? (text, signal) => b.countTokens!(text, signal) : undefined;
}
