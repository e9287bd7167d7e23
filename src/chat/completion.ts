/**
 * A whole (non-streamed) chat completion, parsed, read into what every
 * answer translator needs: the first choice's message (text, reasoning,
 * refusal, tool calls), its finish reason, the usage and the model; or, when
 * the body is not a chat completion, the words to tell the client why.
 */
import { answerText, callArguments, reasoningText } from './content.ts';
import { isObj } from './fields.ts';

/** One tool call of a whole answer; `id` only when the engine gave a non-empty one. */
export interface ChatCallRead {
  id?: string;
  name: string;
  args: string;
}

export interface ChatCompletionRead {
  text: string;
  reasoning: string;
  refusal: string;
  toolCalls: ChatCallRead[];
  finishReason: unknown;
  /** The engine's usage object, as sent. */
  usage: unknown;
}

export type ChatCompletionResult = ({ ok: true } & ChatCompletionRead & { model?: string }) | { ok: false; model?: string; failure: string };

/** Choice 0 (the translations never ask for more; an engine that numbers none still has a first). */
export function readChatCompletion(doc: unknown): ChatCompletionResult {
  const model = isObj(doc) && typeof doc.model === 'string' && doc.model !== '' ? doc.model : undefined;
  const choice = isObj(doc) && Array.isArray(doc.choices) ? (doc.choices.find((c) => isObj(c) && (c.index ?? 0) === 0) ?? doc.choices[0]) : undefined;
  const message = isObj(choice) && isObj(choice.message) ? choice.message : undefined;
  if (!isObj(choice) || !message) {
    const engineError = isObj(doc) && isObj(doc.error) && typeof doc.error.message === 'string' ? `: ${doc.error.message.slice(0, 500)}` : '';
    return { ok: false, model, failure: `the engine's answer is not a chat completion${engineError}` };
  }
  const calls = Array.isArray(message.tool_calls) ? message.tool_calls.filter(isObj) : [];
  return {
    ok: true,
    model,
    text: answerText(message.content),
    reasoning: reasoningText(message),
    refusal: typeof message.refusal === 'string' ? message.refusal : '',
    toolCalls: calls.map((call) => {
      const fn = isObj(call.function) ? call.function : {};
      return { id: typeof call.id === 'string' && call.id !== '' ? call.id : undefined, name: typeof fn.name === 'string' ? fn.name : '', args: callArguments(fn) };
    }),
    finishReason: choice.finish_reason,
    usage: isObj(doc) ? doc.usage : undefined,
  };
}
