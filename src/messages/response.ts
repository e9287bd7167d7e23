/**
 * A chat completion → an Anthropic `message` (whole), and the pieces the
 * stream translator shares with it: stop reasons, usage, tool inputs.
 * Pure; never throws on a malformed completion (the caller gets a 502 text).
 */
import { contentText } from '../responses/index.ts';
import type { AnthropicBlock, AnthropicMessage, AnthropicUsage, MessageMeta, StopReason } from './types.ts';

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

/** How a chat finish_reason ends a message; a turn that called tools ends with tool_use whatever the engine said. */
export function stopReasonFor(finishReason: unknown, calledTools: boolean): StopReason {
  if (calledTools || finishReason === 'tool_calls' || finishReason === 'function_call') return 'tool_use';
  if (finishReason === 'length') return 'max_tokens';
  if (finishReason === 'content_filter') return 'refusal';
  return 'end_turn';
}

/** Chat usage → Anthropic's: input_tokens counts what was not read from the cache (as Anthropic reports it). */
export function chatUsageToAnthropic(usage: unknown): AnthropicUsage {
  const n = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : 0);
  if (!isObj(usage)) return { input_tokens: 0, output_tokens: 0, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 };
  const details = isObj(usage.prompt_tokens_details) ? usage.prompt_tokens_details : {};
  const cached = n(details.cached_tokens);
  const prompt = n(usage.prompt_tokens);
  return { input_tokens: Math.max(0, prompt - cached), output_tokens: n(usage.completion_tokens), cache_read_input_tokens: cached, cache_creation_input_tokens: 0 };
}

/** A tool call's JSON arguments as the `input` object; text that is not a JSON object is kept under `_raw`. */
export function toolInput(args: string): unknown {
  if (args.trim() === '') return {};
  try {
    const v = JSON.parse(args);
    return isObj(v) ? v : { _raw: args };
  } catch {
    return { _raw: args };
  }
}

/** A tool_use id: the engine's call id when it gave one, else one derived from the message id. */
export function toolUseId(meta: Pick<MessageMeta, 'id'>, engineId: unknown, index: number): string {
  if (typeof engineId === 'string' && engineId !== '') return engineId;
  return `toolu_${meta.id.replace(/^msg_/, '').slice(0, 24)}${index.toString(16).padStart(2, '0')}`;
}

export type ChatToMessageResult = { ok: true; message: AnthropicMessage } | { ok: false; message: string };

/** A non-streamed chat completion (parsed) → the Messages API answer. Reasoning is left out (it carries no signature to replay). */
export function chatToMessage(chatResponse: unknown, meta: MessageMeta): ChatToMessageResult {
  const choice = isObj(chatResponse) && Array.isArray(chatResponse.choices) ? (chatResponse.choices.find((c) => isObj(c) && (c.index ?? 0) === 0) ?? chatResponse.choices[0]) : undefined;
  const message = isObj(choice) && isObj(choice.message) ? choice.message : undefined;
  if (!message) {
    const engineError = isObj(chatResponse) && isObj(chatResponse.error) && typeof chatResponse.error.message === 'string' ? `: ${chatResponse.error.message.slice(0, 500)}` : '';
    return { ok: false, message: `the engine's answer is not a chat completion${engineError}` };
  }
  const content: AnthropicBlock[] = [];
  const text = contentText(message.content);
  const calls = Array.isArray(message.tool_calls) ? message.tool_calls.filter(isObj) : [];
  if (text !== '' || calls.length === 0) content.push({ type: 'text', text });
  calls.forEach((call, i) => {
    const fn = isObj(call.function) ? call.function : {};
    const args = typeof fn.arguments === 'string' ? fn.arguments : isObj(fn.arguments) ? JSON.stringify(fn.arguments) : '';
    content.push({ type: 'tool_use', id: toolUseId(meta, call.id, i), name: typeof fn.name === 'string' ? fn.name : '', input: toolInput(args) });
  });
  return {
    ok: true,
    message: {
      id: meta.id,
      type: 'message',
      role: 'assistant',
      model: meta.model,
      content,
      stop_reason: stopReasonFor((choice as Obj).finish_reason, calls.length > 0),
      stop_sequence: null,
      usage: chatUsageToAnthropic(isObj(chatResponse) ? chatResponse.usage : undefined),
    },
  };
}
