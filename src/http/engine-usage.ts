/**
 * What an engine says about a prompt's tokens, from a whole answer or a
 * stream's events: `usage.prompt_tokens`, `usage.prompt_tokens_details.cached_tokens`
 * (OpenAI, vLLM, the sim engine), and llama-server's `timings` (`cache_n` in
 * newer builds; build 4748 has only `prompt_n`, the tokens it processed).
 */

export interface EngineUsage {
  promptTokens?: number;
  cachedTokens?: number;
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
  if (!body || body.length > USAGE_BODY_MAX) return {};
  try {
    const doc = JSON.parse(body.toString('utf8')) as { usage?: { prompt_tokens?: unknown; prompt_tokens_details?: { cached_tokens?: unknown } }; timings?: { prompt_n?: unknown; cache_n?: unknown; prompt_ms?: unknown } };
    if (!doc || typeof doc !== 'object') return {};
    return {
      promptTokens: num(doc.usage?.prompt_tokens),
      cachedTokens: num(doc.usage?.prompt_tokens_details?.cached_tokens),
      promptN: num(doc.timings?.prompt_n),
      cacheN: num(doc.timings?.cache_n),
      promptMs: num(doc.timings?.prompt_ms),
    };
  } catch {
    return {};
  }
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
