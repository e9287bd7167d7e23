/**
 * Score measurement of this node's own executions (SPEC section 9): the time
 * from slot grant to the first content chunk, with the prompt tokens from
 * the engine's usage; for a whole answer, the engine's own prompt time
 * (llama-server's `timings`) when it reports one.
 */

export interface Measured {
  ttftMs: number;
  promptTokens: number;
}

/** Whole answers larger than this are not parsed for usage. */
const MEASURE_BODY_MAX = 1 << 20;

export function measure(grantedAt: number, result: { firstContentAt?: number; promptTokens?: number; cachedTokens?: number; body?: Buffer }): Measured | undefined {
  let ttft: number | undefined;
  let tokens = result.promptTokens;
  let cached = result.cachedTokens;
  if (result.firstContentAt !== undefined) ttft = result.firstContentAt - grantedAt;
  else if (result.body && result.body.length <= MEASURE_BODY_MAX) {
    try {
      const doc = JSON.parse(result.body.toString('utf8')) as { usage?: { prompt_tokens?: number; prompt_tokens_details?: { cached_tokens?: number } }; timings?: { prompt_ms?: number } };
      tokens = doc.usage?.prompt_tokens;
      cached = doc.usage?.prompt_tokens_details?.cached_tokens;
      ttft = doc.timings?.prompt_ms;
    } catch {
      return undefined;
    }
  }
  if (typeof ttft !== 'number' || typeof tokens !== 'number') return undefined;
  const processed = typeof cached === 'number' && cached > 0 ? Math.max(0, tokens - cached) : tokens;
  return { ttftMs: ttft, promptTokens: processed };
}
