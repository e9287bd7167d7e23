/**
 * One streamed chat-completion chunk read into what every answer translator
 * needs (Responses and Messages alike): the first choice's text, reasoning,
 * refusal and tool-call pieces, its finish reason, the usage, an error.
 * Engines differ in small ways (a tool call's name split or repeated,
 * arguments as an object, `reasoning` or `reasoning_content`); this is the
 * one place that knows them.
 */
import { answerText, callArguments, reasoningText } from './content.ts';
import { isObj } from './fields.ts';

/** A piece of one tool call: `key` tells calls apart (the engine's index, else the position in the chunk). */
export interface ToolCallPiece {
  key: number;
  id?: string;
  name?: string;
  args: string;
}

export interface ChatChunk {
  model?: string;
  /** The engine's usage object, as sent. */
  usage?: unknown;
  error?: string;
  text: string;
  reasoning: string;
  refusal: string;
  toolCalls: ToolCallPiece[];
  finishReason?: unknown;
}

/** Read one parsed `data:` payload of a chat stream (choice 0 only: the translations never ask for more). */
export function readChatChunk(chunk: unknown): ChatChunk {
  const out: ChatChunk = { text: '', reasoning: '', refusal: '', toolCalls: [] };
  if (!isObj(chunk)) return out;
  if (chunk.error !== undefined && chunk.error !== null) {
    const e = chunk.error;
    out.error = (isObj(e) && typeof e.message === 'string' ? e.message : typeof e === 'string' ? e : 'the engine reported an error').slice(0, 1000);
    return out;
  }
  if (typeof chunk.model === 'string' && chunk.model !== '') out.model = chunk.model;
  if (isObj(chunk.usage)) out.usage = chunk.usage;
  const choices = Array.isArray(chunk.choices) ? chunk.choices.filter(isObj) : [];
  for (const choice of choices) {
    if ((choice.index ?? 0) !== 0) continue;
    const delta = isObj(choice.delta) ? choice.delta : {};
    out.reasoning += reasoningText(delta);
    out.text += answerText(delta.content);
    if (typeof delta.refusal === 'string') out.refusal += delta.refusal;
    if (Array.isArray(delta.tool_calls))
      delta.tool_calls.forEach((tc, i) => {
        if (!isObj(tc)) return;
        const fn = isObj(tc.function) ? tc.function : {};
        out.toolCalls.push({
          key: typeof tc.index === 'number' ? tc.index : i,
          id: typeof tc.id === 'string' && tc.id !== '' ? tc.id : undefined,
          name: typeof fn.name === 'string' && fn.name !== '' ? fn.name : undefined,
          args: callArguments(fn),
        });
      });
    if (choice.finish_reason !== undefined && choice.finish_reason !== null) out.finishReason = choice.finish_reason;
  }
  return out;
}

/** A whole tool call's name across its pieces: some engines split it, others repeat it in every piece. */
export function joinName(sofar: string, piece: string | undefined): string {
  if (piece === undefined || piece === sofar) return sofar;
  return sofar + piece;
}
