/**
 * Score measurement of this node's own executions (SPEC section 9): the time
 * from slot grant to the first content chunk, with the prompt tokens from
 * the engine's usage less those it served from its cache (its own count;
 * when it gives none, the node's prediction); for a whole answer, the
 * engine's own prompt time (llama-server's `timings`) when it reports one.
 */
import { engineCachedTokens, usageOfBody, type EngineUsage } from '../../http/engine-usage.ts';

export interface Measured {
  ttftMs: number;
  promptTokens: number;
}

/** Whole answers larger than this are not parsed for usage. */
const MEASURE_BODY_MAX = 1 << 20;

export function measure(grantedAt: number, result: { firstContentAt?: number; promptTokens?: number; cachedTokens?: number; body?: Buffer; usage?: EngineUsage }, predictedCached?: number): Measured | undefined {
  let ttft: number | undefined;
  let tokens = result.promptTokens;
  let cached = result.cachedTokens;
  if (result.firstContentAt !== undefined) ttft = result.firstContentAt - grantedAt;
  else if (result.body && result.body.length <= MEASURE_BODY_MAX) {
    const u = result.usage ?? usageOfBody(result.body);
    tokens = u.promptTokens;
    cached = cached ?? engineCachedTokens(u);
    ttft = u.promptMs;
  }
  if (typeof ttft !== 'number' || typeof tokens !== 'number') return undefined;
  cached ??= predictedCached;
  const processed = typeof cached === 'number' && cached > 0 ? Math.max(0, tokens - cached) : tokens;
  return { ttftMs: ttft, promptTokens: processed };
}
