/**
 * What /v1/messages/count_tokens counts: the text the engine would read for
 * this request (system, turns, tool calls and results, the tools' JSON), as
 * one string for an engine's tokenizer, and the estimate when no engine
 * tokenizer is at hand (bytes ÷ 4, the node's estimate everywhere else).
 */
import type { ChatRequest } from '../chat/index.ts';
import { estimateTokens as estimateFromBytes } from '../prompt/tokens.ts';

/** The request's text for a tokenizer: tools first, then each message's role and content, as chat templates lay them out. */
export function countText(chat: ChatRequest): string {
  const parts: string[] = [];
  for (const t of chat.tools ?? []) parts.push(JSON.stringify(t.function));
  for (const m of chat.messages) {
    parts.push(m.role);
    if (typeof m.content === 'string') parts.push(m.content);
    else if (Array.isArray(m.content)) for (const p of m.content) parts.push(p.type === 'text' ? p.text : JSON.stringify(p));
    if (m.role === 'assistant' && m.tool_calls) parts.push(JSON.stringify(m.tool_calls));
  }
  return parts.join('\n');
}

/** The estimate: one token per 4 bytes of that text (at least 1). */
export function estimateTokens(text: string): number {
  return estimateFromBytes(Buffer.byteLength(text));
}
