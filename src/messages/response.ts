/**
 * A chat completion → an Anthropic `message` (whole), and the pieces the
 * stream translator shares with it: stop reasons, usage, tool inputs.
 * Pure; never throws on a malformed completion (the caller gets a 502 text).
 */
import { readChatCompletion, readChatUsage, toolInput } from '../chat/index.ts';
import type { AnthropicBlock, AnthropicMessage, AnthropicUsage, MessageMeta, StopReason } from './types.ts';

/** Tool inputs are read in chat/ (the prefix chain reads a Messages reply the same way); kept here for its readers. */
export { toolInput };

/** How a chat finish_reason ends a message; a turn that called tools ends with tool_use whatever the engine said. */
export function stopReasonFor(finishReason: unknown, calledTools: boolean): StopReason {
  if (calledTools || finishReason === 'tool_calls' || finishReason === 'function_call') return 'tool_use';
  if (finishReason === 'length') return 'max_tokens';
  if (finishReason === 'content_filter') return 'refusal';
  return 'end_turn';
}

/** Chat usage → Anthropic's: input_tokens counts what was not read from the cache (as Anthropic reports it). */
export function chatUsageToAnthropic(usage: unknown): AnthropicUsage {
  const u = readChatUsage(usage);
  if (!u) return { input_tokens: 0, output_tokens: 0, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 };
  return { input_tokens: Math.max(0, u.promptTokens - u.cachedTokens), output_tokens: u.completionTokens, cache_read_input_tokens: u.cachedTokens, cache_creation_input_tokens: 0 };
}

/** A tool_use id: the engine's call id when it gave one, else one derived from the message id. */
export function toolUseId(meta: Pick<MessageMeta, 'id'>, engineId: unknown, index: number): string {
  if (typeof engineId === 'string' && engineId !== '') return engineId;
  return `toolu_${meta.id.replace(/^msg_/, '').slice(0, 24)}${index.toString(16).padStart(2, '0')}`;
}

export type ChatToMessageResult = { ok: true; message: AnthropicMessage } | { ok: false; message: string };

/** A non-streamed chat completion (parsed) → the Messages API answer. Reasoning is left out (it carries no signature to replay). */
export function chatToMessage(chatResponse: unknown, meta: MessageMeta): ChatToMessageResult {
  const c = readChatCompletion(chatResponse);
  if (!c.ok) return { ok: false, message: c.failure };
  const content: AnthropicBlock[] = [];
  if (c.text !== '' || c.toolCalls.length === 0) content.push({ type: 'text', text: c.text });
  c.toolCalls.forEach((call, i) => {
    content.push({ type: 'tool_use', id: toolUseId(meta, call.id, i), name: call.name, input: toolInput(call.args) });
  });
  return {
    ok: true,
    message: {
      id: meta.id,
      type: 'message',
      role: 'assistant',
      model: meta.model,
      content,
      stop_reason: stopReasonFor(c.finishReason, c.toolCalls.length > 0),
      stop_sequence: null,
      usage: chatUsageToAnthropic(c.usage),
    },
  };
}
