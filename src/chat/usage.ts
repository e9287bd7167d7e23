/**
 * A chat engine's `usage` object read into counts, for each API's own usage
 * shape (Responses, Messages). A count the engine left out, or sent as
 * something other than a non-negative number, is 0.
 */
import { isObj } from './fields.ts';

export interface ChatUsageRead {
  promptTokens: number;
  completionTokens: number;
  /** Of the prompt tokens, those read from the engine's cache. */
  cachedTokens: number;
  reasoningTokens: number;
  /** The engine's total_tokens, when it sent a number; undefined when it sent none. */
  totalTokens?: number;
}

const count = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : 0);

/** undefined when the engine reported no usage object at all. */
export function readChatUsage(usage: unknown): ChatUsageRead | undefined {
  if (!isObj(usage)) return undefined;
  const pd = isObj(usage.prompt_tokens_details) ? usage.prompt_tokens_details : {};
  const cd = isObj(usage.completion_tokens_details) ? usage.completion_tokens_details : {};
  return {
    promptTokens: count(usage.prompt_tokens),
    completionTokens: count(usage.completion_tokens),
    cachedTokens: count(pd.cached_tokens),
    reasoningTokens: count(cd.reasoning_tokens),
    totalTokens: typeof usage.total_tokens === 'number' ? count(usage.total_tokens) : undefined,
  };
}
