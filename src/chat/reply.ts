/**
 * The assistant's reply as a chat engine's answer gives it (choice 0): its
 * text and tool calls, what a client echoes as the next turn's assistant
 * message. The executor records it with the prompt its engine cached (SPEC
 * section 7, "Cache digest"), since the engine's slot holds the prompt and
 * the tokens it generated.
 *
 * A reply with reasoning is not one: the client does not echo the reasoning
 * (chat templates drop it from earlier turns), so the engine's cache parts
 * from the next prompt where the reply begins.
 *
 * Streams are read cheaply: once the caller has seen the first content,
 * most events carry one `"content":"…"` string, and only that string is
 * decoded; an event with tool calls, reasoning, content parts or a second
 * `content` key is parsed whole. A refusal is not part of what a client
 * echoes (the prefix chain reads a message's content and tool calls).
 */
import { answerText, callArguments, joinName, readChatChunk, reasoningText } from './answer.ts';
import { isObj } from './fields.ts';
import { eventData } from './sse.ts';

export interface ChatReply {
  readonly text: string;
  /** In the engine's order: the function's name and its arguments as JSON text. */
  readonly calls: readonly { readonly name: string; readonly args: string }[];
}

/** The reply of a whole chat completion (parsed); undefined when it is not one, or it reasoned. */
export function replyOfCompletion(doc: unknown): ChatReply | undefined {
  const choice = isObj(doc) && Array.isArray(doc.choices) ? (doc.choices.find((c) => isObj(c) && (c.index ?? 0) === 0) ?? doc.choices[0]) : undefined;
  const message = isObj(choice) && isObj(choice.message) ? choice.message : undefined;
  if (!message || reasoningText(message) !== '') return undefined;
  const calls = Array.isArray(message.tool_calls) ? message.tool_calls.filter(isObj) : [];
  return {
    text: answerText(message.content),
    calls: calls.map((c) => {
      const fn = isObj(c.function) ? c.function : {};
      return { name: typeof fn.name === 'string' ? fn.name : '', args: callArguments(fn) };
    }),
  };
}

const CONTENT = '"content":';
const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/** A stream's reply, gathered event by event. */
export class ReplyCollector {
  #text = '';
  readonly #calls = new Map<number, { name: string; args: string }>();
  #lost = false;

  /** The reply so far; undefined once it cannot be known (reasoning, an event that did not parse). */
  get reply(): ChatReply | undefined {
    if (this.#lost) return undefined;
    return { text: this.#text, calls: [...this.#calls.values()] };
  }

  /** Nothing more is worth reading (the reply cannot be known). */
  get done(): boolean {
    return this.#lost;
  }

  /** The reply cannot be known (the caller failed to read an event). */
  lose(): void {
    this.#lost = true;
  }

  /** A `data:` payload the caller has parsed already. */
  chunk(parsed: unknown): void {
    if (this.#lost) return;
    const c = readChatChunk(parsed);
    if (c.reasoning !== '') return this.lose();
    this.#text += c.text;
    for (const p of c.toolCalls) {
      const call = this.#calls.get(p.key) ?? { name: '', args: '' };
      call.name = joinName(call.name, p.name);
      call.args += p.args;
      this.#calls.set(p.key, call);
    }
  }

  /** One whole SSE event, as bytes: its content string alone is decoded when that is all it can hold. */
  event(event: Buffer): void {
    this.eventAt(event.toString('latin1'), event, 0);
  }

  /**
   * One whole SSE event: `ev` is its latin1 view (a character per byte, searched as a string), found at `at` in
   * `buf`, whose bytes are decoded as UTF-8 only where the content string is.
   */
  eventAt(ev: string, buf: Buffer, at: number): void {
    if (this.#lost) return;
    // Tool calls and reasoning (`reasoning_content` or `reasoning`) go to the whole parse.
    if (!ev.includes('"tool_calls"') && !ev.includes('"reasoning')) {
      const key = ev.indexOf(CONTENT);
      // A role-only or finishing event: no text.
      if (key < 0) return;
      let i = key + CONTENT.length;
      while (i < ev.length && isSpace(ev.charCodeAt(i))) i++;
      // One content key (a second one, as in some engines' logprobs, is left to the whole parse).
      if (ev.indexOf(CONTENT, i) < 0) {
        if (ev.startsWith('null', i)) return;
        const end = ev.charCodeAt(i) === QUOTE ? stringEnd(ev, i) : -1;
        if (end > 0) {
          // Without an escape a JSON string's text is its bytes between the quotes (most streamed tokens).
          const escaped = ev.indexOf('\\', i + 1);
          this.#text += escaped < 0 || escaped >= end ? buf.toString('utf8', at + i + 1, at + end - 1) : (JSON.parse(buf.toString('utf8', at + i, at + end)) as string);
          return;
        }
      }
    }
    const data = eventData(buf.subarray(at, at + ev.length));
    if (!data || data === '[DONE]') return;
    try {
      this.chunk(JSON.parse(data));
    } catch {
      this.lose();
    }
  }
}

const isSpace = (c: number) => c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d;

/** The end (exclusive, past the closing quote) of the JSON string opening at `start`, or -1. */
function stringEnd(text: string, start: number): number {
  for (let i = text.indexOf('"', start + 1); i >= 0; i = text.indexOf('"', i + 1)) {
    let k = i - 1;
    while (text.charCodeAt(k) === BACKSLASH) k--;
    if ((i - 1 - k) % 2 === 0) return i + 1;
  }
  return -1;
}
