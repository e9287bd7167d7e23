/**
 * Reading the pieces of a chat engine's answer that engines write in more
 * than one way; the whole-answer reader and the chunk reader both use these,
 * so a quirk is handled once.
 */
import { isObj, type Obj } from './fields.ts';

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
