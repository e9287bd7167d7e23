/**
 * The one stand-in for a tokenizer (SPEC: "bytes ÷ 4 where the engine has
 * not said"): the prefix chain's token counts, the sim engine's tokens, the
 * API's prompt-size estimate and count_tokens's fallback all use it, so
 * they agree with each other when no engine has counted.
 */

/** Characters (of canonical text) or bytes (of a body) per token. */
export const CHARS_PER_TOKEN = 4;

/** Tokens in `n` bytes or characters, rounded down (a chain link's cumulative count). */
export function tokensIn(n: number): number {
  return Math.floor(n / CHARS_PER_TOKEN);
}

/** The estimate for a whole text of `n` bytes: rounded up, at least 1 (a body, a prompt to count). */
export function estimateTokens(n: number): number {
  return Math.max(1, Math.ceil(n / CHARS_PER_TOKEN));
}
