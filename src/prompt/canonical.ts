/**
 * Canonical prompt text: what a chat template renders, the same whichever
 * dialect a request came in (SPEC section 9, step 6). Each segment is
 * `<|role|>\ntext\n`, a chat ends in `<|assistant|>\n`; content parts,
 * tool calls and tool definitions have one text each, and JSON values are
 * written with sorted keys, so whitespace, key order and escapes never change
 * it. Pure.
 */
import { isObj } from '../chat/index.ts';

/** One piece of canonical prompt: a tool definition (role `tools`) or a message. */
export interface Segment {
  readonly role: string;
  readonly text: string;
}

/** The prompt text a chat template renders from segments: the system message(s), the tools, then the conversation, then the assistant's opening. */
export function renderChat(segments: Iterable<Segment>): string {
  let out = '';
  for (const s of segments) out += renderSegment(s);
  return out + GENERATION_PROMPT;
}

/** One segment as the template renders it. */
export function renderSegment(s: Segment): string {
  return `<|${s.role}|>\n${s.text}\n`;
}

/** What a chat prompt ends with: the assistant's turn opening (not part of any link). */
export const GENERATION_PROMPT = '<|assistant|>\n';

const TEXT_PARTS = new Set(['text', 'input_text', 'output_text']);

export function partText(part: unknown): string {
  if (typeof part === 'string') return part;
  if (isObj(part)) {
    if (TEXT_PARTS.has(part.type as string) && typeof part.text === 'string') return part.text;
    if (part.type === 'refusal' && typeof part.refusal === 'string') return part.refusal;
    return canonicalJson(part);
  }
  return part === undefined || part === null ? '' : String(part);
}

/** A content value's text: a string as it is, parts joined by newlines (as the Responses translation joins them). */
export function canonicalContentText(content: unknown): string {
  if (Array.isArray(content)) return content.map(partText).join('\n');
  return partText(content);
}

export function callText(name: unknown, args: string): string {
  return `<tool_call>${typeof name === 'string' ? name : ''} ${args}</tool_call>`;
}

export function chatCalls(calls: unknown): string[] {
  if (!Array.isArray(calls)) return [];
  return calls.map((c) => {
    const fn = isObj(c) && isObj(c.function) ? c.function : {};
    return callText(fn.name, typeof fn.arguments === 'string' ? fn.arguments : canonicalJson(fn.arguments ?? {}));
  });
}

/** A tool definition in any of the three shapes (chat's nested `function`, Responses' flat, Messages' `input_schema`). */
export function toolText(tool: unknown): string {
  if (!isObj(tool)) return canonicalJson(tool);
  const fn = isObj(tool.function) ? tool.function : tool;
  if (typeof fn.name !== 'string') return canonicalJson(tool);
  const params = fn.parameters ?? fn.input_schema ?? {};
  return `${fn.name}\n${typeof fn.description === 'string' ? fn.description : ''}\n${canonicalJson(params)}`;
}

export function joinLines(parts: readonly string[]): string {
  return parts.filter((p) => p !== '').join('\n');
}

/** JSON with object keys sorted at every level: the same value always gives the same text. */
export function canonicalJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  if (isObj(v))
    return `{${Object.keys(v)
      .sort()
      .filter((k) => v[k] !== undefined)
      .map((k) => `${JSON.stringify(k)}:${canonicalJson(v[k])}`)
      .join(',')}}`;
  return JSON.stringify(v) ?? 'null';
}

