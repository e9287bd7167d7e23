/**
 * Streamed chat completion chunks → Anthropic's Messages event stream, the
 * sequence the official SDKs and Claude Code accumulate:
 *
 *   message_start, ping,
 *   per content block (one open at a time, in order):
 *     content_block_start, content_block_delta (text_delta | input_json_delta)…, content_block_stop
 *   message_delta (stop_reason, usage), message_stop.
 *
 * `ping` is also what the node writes while the engine is silent (keepAlive).
 * A failure ends the stream with an `error` event in Anthropic's shape.
 * Reasoning deltas are left out (a thinking block needs a signature the
 * engine cannot give). Pure: feed it, write what it returns.
 */
import { ChatStreamTranslator, sseEvent, type ChatChunk, type ToolCallPiece } from '../chat/index.ts';
import { chatUsageToAnthropic, stopReasonFor, toolUseId } from './response.ts';
import type { AnthropicUsage, MessageMeta } from './types.ts';

/** An Anthropic server-sent event, as text. */
export function anthropicEvent(type: string, data: Record<string, unknown>): string {
  return sseEvent(type, { type, ...data });
}

/** The keep-alive event of a Messages stream. */
export const PING = anthropicEvent('ping', {});

type Open = { kind: 'text'; index: number } | { kind: 'tool'; index: number; key: number };

export class MessagesStreamTranslator extends ChatStreamTranslator {
  #blocks = 0;
  #open?: Open;
  /** Tool calls seen (chat key → its block index), and those whose block has closed. */
  #calls = new Map<number, number>();
  #closedCalls = new Set<number>();
  #usage?: AnthropicUsage;

  constructor(private readonly meta: MessageMeta) {
    super('message');
  }

  /** message_start, then a ping. */
  protected override opening(): string {
    const message = { id: this.meta.id, type: 'message', role: 'assistant', model: this.meta.model, content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 0, output_tokens: 0 } };
    return anthropicEvent('message_start', { message }) + PING;
  }

  protected override translate(c: ChatChunk): string {
    let out = '';
    if (c.usage) this.#usage = chatUsageToAnthropic(c.usage);
    const text = c.text + c.refusal;
    if (text !== '') out += this.#text(text);
    for (const tc of c.toolCalls) out += this.#tool(tc);
    return out;
  }

  /** An `error` event in Anthropic's shape (which has no code). */
  protected override failure(message: string): string {
    return anthropicEvent('error', { error: { type: 'api_error', message } });
  }

  #close(): string {
    if (!this.#open) return '';
    const o = this.#open;
    this.#open = undefined;
    if (o.kind === 'tool') this.#closedCalls.add(o.key);
    return anthropicEvent('content_block_stop', { index: o.index });
  }

  #text(text: string): string {
    let out = '';
    if (this.#open?.kind !== 'text') {
      out += this.#close();
      const index = this.#blocks++;
      this.#open = { kind: 'text', index };
      out += anthropicEvent('content_block_start', { index, content_block: { type: 'text', text: '' } });
    }
    return out + anthropicEvent('content_block_delta', { index: this.#open!.index, delta: { type: 'text_delta', text } });
  }

  #tool(tc: ToolCallPiece): string {
    let out = '';
    let index = this.#calls.get(tc.key);
    if (index === undefined) {
      out += this.#close();
      index = this.#blocks++;
      this.#calls.set(tc.key, index);
      this.#open = { kind: 'tool', index, key: tc.key };
      out += anthropicEvent('content_block_start', { index, content_block: { type: 'tool_use', id: toolUseId(this.meta, tc.id, this.#calls.size - 1), name: tc.name ?? '', input: {} } });
    }
    // A piece of a call whose block has closed (an engine interleaving calls) cannot be sent any more.
    if (tc.args !== '' && !this.#closedCalls.has(tc.key) && this.#open?.kind === 'tool' && this.#open.key === tc.key) {
      out += anthropicEvent('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: tc.args } });
    }
    return out;
  }

  /** The open block closed, then message_delta (stop_reason, usage) and message_stop. */
  protected override completion(finishReason: unknown): string {
    let out = '';
    // A message always has a block: Claude Code prints nothing without a content_block_stop.
    if (this.#blocks === 0) out += this.#text('');
    out += this.#close();
    const usage = this.#usage ?? { input_tokens: 0, output_tokens: 0, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 };
    out += anthropicEvent('message_delta', { delta: { stop_reason: stopReasonFor(finishReason, this.#calls.size > 0), stop_sequence: null }, usage });
    return out + anthropicEvent('message_stop', {});
  }
}
