/**
 * Reading a chat engine's answer into what every answer translator needs
 * (Responses and Messages alike): a whole completion, one streamed chunk, the
 * usage object, and the pieces inside them that engines write in more than
 * one way (a tool call's name split or repeated, arguments as an object,
 * `reasoning` or `reasoning_content`, content as text parts). This is the
 * one place that knows those quirks, so each is handled once.
 */
import { isObj, type Obj } from './fields.ts';

// ---- The pieces engines write in more than one way

/**
 * The text of an answer's `content` (a message's, or a chunk delta's): a
 * string, or some engines' list of text parts joined as they are; anything
 * else is no text. (The prefix chain's canonical text and the embedded
 * engine's strict reading of a request are other jobs, with their own names.)
 */
export function answerText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) return content.map((p) => (isObj(p) && typeof p.text === 'string' ? p.text : '')).join('');
  return '';
}

/** Reasoning text of a message or delta: engines name it `reasoning_content` or `reasoning`. */
export function reasoningText(o: Obj): string {
  return typeof o.reasoning_content === 'string' ? o.reasoning_content : typeof o.reasoning === 'string' ? o.reasoning : '';
}

/** A tool call's `function.arguments` as JSON text: some engines send an object instead of a string. */
export function callArguments(fn: Obj): string {
  return typeof fn.arguments === 'string' ? fn.arguments : isObj(fn.arguments) ? JSON.stringify(fn.arguments) : '';
}

/**
 * A tool call's JSON arguments as an object (Anthropic's tool_use `input`);
 * text that is not a JSON object is kept under `_raw`. Here, not in
 * messages/, because the prefix chain reads a Messages reply the same way.
 */
export function toolInput(args: string): unknown {
  if (args.trim() === '') return {};
  try {
    const v = JSON.parse(args);
    return isObj(v) ? v : { _raw: args };
  } catch {
    return { _raw: args };
  }
}

// ---- A whole (non-streamed) completion: choice 0, or the words to tell the client why it is none

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

// ---- One streamed chunk

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

// ---- The usage object, read into counts for each API's own usage shape; a count left out or not a non-negative number is 0

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
