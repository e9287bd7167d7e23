/**
 * What an engine says about a prompt's tokens, from a whole answer or a
 * stream's events: `usage.prompt_tokens`, `usage.prompt_tokens_details.cached_tokens`
 * (OpenAI, vLLM, the sim engine), and llama-server's `timings` (`cache_n` in
 * newer builds; build 4748 has only `prompt_n`, the tokens it processed).
 */
import { replyOfCompletion, type ChatReply } from '../chat/index.ts';

export interface EngineUsage {
  promptTokens?: number;
  cachedTokens?: number;
  /** `usage.completion_tokens`: what a key is charged for its output (SPEC section 12). */
  completionTokens?: number;
  promptN?: number;
  cacheN?: number;
  /** llama-server's own prompt time (whole answers). */
  promptMs?: number;
}

/** Whole answers larger than this are not parsed. */
export const USAGE_BODY_MAX = 1 << 20;

const num = (x: unknown): number | undefined => (typeof x === 'number' && Number.isFinite(x) && x >= 0 ? x : undefined);

/** The usage of a whole JSON answer; {} when it has none or is not JSON. */
export function usageOfBody(body: Buffer | undefined): EngineUsage {
  return answerOfBody(body).usage;
}

/** A whole JSON answer read once: its usage, and (`reply`) the assistant's reply of a chat completion. */
export function answerOfBody(body: Buffer | undefined, reply = false): { usage: EngineUsage; reply?: ChatReply } {
  if (!body || body.length > USAGE_BODY_MAX) return { usage: {} };
  let doc: AnswerDoc;
  try {
    doc = JSON.parse(body.toString('utf8'));
  } catch {
    return { usage: {} };
  }
  if (!doc || typeof doc !== 'object') return { usage: {} };
  const r = reply ? replyOfCompletion(doc) : undefined;
  return { usage: usageOfDoc(doc), ...(r ? { reply: r } : {}) };
}

type AnswerDoc = { usage?: { prompt_tokens?: unknown; completion_tokens?: unknown; prompt_tokens_details?: { cached_tokens?: unknown } }; timings?: { prompt_n?: unknown; cache_n?: unknown; prompt_ms?: unknown } };

function usageOfDoc(doc: AnswerDoc): EngineUsage {
  return {
    promptTokens: num(doc.usage?.prompt_tokens),
    cachedTokens: num(doc.usage?.prompt_tokens_details?.cached_tokens),
    completionTokens: num(doc.usage?.completion_tokens),
    promptN: num(doc.timings?.prompt_n),
    cacheN: num(doc.timings?.cache_n),
    promptMs: num(doc.timings?.prompt_ms),
  };
}

/**
 * The engine's cached-token count: its cached_tokens, else llama-server's
 * cache_n, else prompt tokens less prompt_n (older llama-server builds);
 * undefined when it says nothing of its cache.
 */
export function engineCachedTokens(u: EngineUsage): number | undefined {
  if (u.cachedTokens !== undefined) return u.cachedTokens;
  if (u.cacheN !== undefined) return u.cacheN;
  if (u.promptTokens !== undefined && u.promptN !== undefined) return Math.max(0, u.promptTokens - u.promptN);
  return undefined;
}
