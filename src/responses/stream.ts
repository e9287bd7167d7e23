/**
 * Streamed chat completion chunks → Responses API server-sent events, in
 * the order the official SDKs accumulate them:
 *
 *   response.created, response.in_progress,
 *   per output item: response.output_item.added,
 *     message:   content_part.added, output_text.delta…, output_text.done, content_part.done
 *     reasoning: content_part.added, reasoning_text.delta…, reasoning_text.done, content_part.done
 *     function:  function_call_arguments.delta…, function_call_arguments.done
 *   response.output_item.done,
 *   response.completed (or response.incomplete) with usage.
 *
 * A failure ends the stream with response.failed, then an `error` event that
 * carries OpenAI's error shape (the SDKs raise it as an APIError). Every
 * event has a `sequence_number` from 0 up. Pure: feed it, write what it returns.
 */
import { ChatStreamTranslator, joinName, sseEvent, type ChatChunk, type Obj, type ToolCallPiece } from '../chat/index.ts';
import { baseResponse, chatUsageToResponses, itemId, restoreNamespace, statusFor } from './response.ts';
import type { ItemStatus, OutputItem, OutputRefusal, OutputText, ReasoningText, ResponseMeta, ResponseObject, ResponseUsage } from './types.ts';

type MessageItem = Extract<OutputItem, { type: 'message' }>;
type CallItem = Extract<OutputItem, { type: 'function_call' }>;
type ReasoningItem = Extract<OutputItem, { type: 'reasoning' }>;

export interface StreamTranslatorOptions {
  /** Unix seconds, for `completed_at`. */
  now?: () => number;
}

export class ResponsesStreamTranslator extends ChatStreamTranslator {
  #seq = 0;
  #model: string;
  #output: OutputItem[] = [];
  #open = new Set<number>();
  #reasoning?: number;
  #message?: number;
  #textPart?: number;
  #refusalPart?: number;
  #calls = new Map<number, number>();
  #usage?: ResponseUsage;
  readonly #now: () => number;

  constructor(
    private readonly meta: ResponseMeta,
    opts: StreamTranslatorOptions = {},
  ) {
    super('response');
    this.#model = meta.model;
    this.#now = opts.now ?? (() => Math.floor(Date.now() / 1000));
  }

  /** The usage the engine reported, in Responses form (for the node's own accounting). */
  get usage(): ResponseUsage | undefined {
    return this.#usage;
  }

  /** response.created and response.in_progress. */
  protected override opening(): string {
    const r = this.#response('in_progress');
    return this.#emit('response.created', { response: r }) + this.#emit('response.in_progress', { response: r });
  }

  protected override translate(c: ChatChunk): string {
    let out = '';
    if (c.model) this.#model = c.model;
    const usage = chatUsageToResponses(c.usage);
    if (usage) this.#usage = usage;
    if (c.reasoning !== '') out += this.#reasoningDelta(c.reasoning);
    if (c.text !== '') out += this.#textDelta(c.text);
    if (c.refusal !== '') out += this.#refusalDelta(c.refusal);
    for (const tc of c.toolCalls) out += this.#toolCallDelta(tc);
    return out;
  }

  /** response.failed, then an `error` event in OpenAI's error shape (the SDKs raise it as an APIError). */
  protected override failure(message: string, code = 'server_error'): string {
    let out = '';
    for (const i of this.#open) this.#output[i].status = 'incomplete';
    this.#open.clear();
    const r = this.#response('failed');
    r.error = { code, message };
    out += this.#emit('response.failed', { response: r });
    out += this.#emit('error', { code, message, param: null, error: { message, type: 'server_error', code } });
    return out;
  }

  // ---- items ------------------------------------------------------------

  #add(item: OutputItem): { out: string; index: number } {
    const index = this.#output.length;
    this.#output.push(item);
    this.#open.add(index);
    return { out: this.#emit('response.output_item.added', { output_index: index, item: structuredClone(item) }), index };
  }

  #reasoningDelta(delta: string): string {
    let out = '';
    if (this.#reasoning === undefined || !this.#open.has(this.#reasoning)) {
      const item: ReasoningItem = { type: 'reasoning', id: itemId(this.meta, 'rs', this.#output.length), summary: [], content: [], status: 'in_progress' };
      const added = this.#add(item);
      this.#reasoning = added.index;
      out += added.out;
      const part: ReasoningText = { type: 'reasoning_text', text: '' };
      item.content.push(part);
      out += this.#emit('response.content_part.added', { item_id: item.id, output_index: added.index, content_index: 0, part: { ...part } });
    }
    const item = this.#output[this.#reasoning] as ReasoningItem;
    item.content[0].text += delta;
    return out + this.#emit('response.reasoning_text.delta', { item_id: item.id, output_index: this.#reasoning, content_index: 0, delta });
  }

  /** Reasoning precedes the answer: it closes when anything else starts. */
  #closeReasoning(): string {
    if (this.#reasoning === undefined || !this.#open.has(this.#reasoning)) return '';
    return this.#close(this.#reasoning, 'completed');
  }

  #ensureMessage(): { out: string; item: MessageItem; index: number } {
    let out = this.#closeReasoning();
    if (this.#message === undefined) {
      const item: MessageItem = { type: 'message', id: itemId(this.meta, 'msg', this.#output.length), role: 'assistant', status: 'in_progress', content: [] };
      const added = this.#add(item);
      this.#message = added.index;
      out += added.out;
    }
    return { out, item: this.#output[this.#message] as MessageItem, index: this.#message };
  }

  #textDelta(delta: string): string {
    const m = this.#ensureMessage();
    let out = m.out;
    if (this.#textPart === undefined) {
      const part: OutputText = { type: 'output_text', text: '', annotations: [], logprobs: [] };
      this.#textPart = m.item.content.length;
      m.item.content.push(part);
      out += this.#emit('response.content_part.added', { item_id: m.item.id, output_index: m.index, content_index: this.#textPart, part: structuredClone(part) });
    }
    (m.item.content[this.#textPart] as OutputText).text += delta;
    return out + this.#emit('response.output_text.delta', { item_id: m.item.id, output_index: m.index, content_index: this.#textPart, delta, logprobs: [] });
  }

  #refusalDelta(delta: string): string {
    const m = this.#ensureMessage();
    let out = m.out;
    if (this.#refusalPart === undefined) {
      const part: OutputRefusal = { type: 'refusal', refusal: '' };
      this.#refusalPart = m.item.content.length;
      m.item.content.push(part);
      out += this.#emit('response.content_part.added', { item_id: m.item.id, output_index: m.index, content_index: this.#refusalPart, part: { ...part } });
    }
    (m.item.content[this.#refusalPart] as OutputRefusal).refusal += delta;
    return out + this.#emit('response.refusal.delta', { item_id: m.item.id, output_index: m.index, content_index: this.#refusalPart, delta });
  }

  #toolCallDelta(tc: ToolCallPiece): string {
    let out = this.#closeReasoning();
    let index = this.#calls.get(tc.key);
    if (index === undefined) {
      const outputIndex = this.#output.length;
      const id = itemId(this.meta, 'fc', outputIndex);
      const item: CallItem = {
        type: 'function_call',
        id,
        call_id: tc.id ?? `call_${id.slice(3)}`,
        name: tc.name ?? '',
        arguments: '',
        status: 'in_progress',
      };
      restoreNamespace(item, this.meta);
      const added = this.#add(item);
      index = added.index;
      this.#calls.set(tc.key, index);
      out += added.out;
    } else {
      const item = this.#output[index] as CallItem;
      if (item.namespace === undefined) item.name = joinName(item.name, tc.name); // whole in output_item.done
    }
    const item = this.#output[index] as CallItem;
    if (tc.args !== '' && this.#open.has(index)) {
      item.arguments += tc.args;
      out += this.#emit('response.function_call_arguments.delta', { item_id: item.id, output_index: index, delta: tc.args });
    }
    return out;
  }

  #close(index: number, status: ItemStatus): string {
    this.#open.delete(index);
    const item = this.#output[index];
    let out = '';
    if (item.type === 'message') {
      item.content.forEach((part, c) => {
        if (part.type === 'output_text') out += this.#emit('response.output_text.done', { item_id: item.id, output_index: index, content_index: c, text: part.text, logprobs: [] });
        else out += this.#emit('response.refusal.done', { item_id: item.id, output_index: index, content_index: c, refusal: part.refusal });
        out += this.#emit('response.content_part.done', { item_id: item.id, output_index: index, content_index: c, part: structuredClone(part) });
      });
    } else if (item.type === 'reasoning') {
      item.content.forEach((part, c) => {
        out += this.#emit('response.reasoning_text.done', { item_id: item.id, output_index: index, content_index: c, text: part.text });
        out += this.#emit('response.content_part.done', { item_id: item.id, output_index: index, content_index: c, part: { ...part } });
      });
    } else {
      restoreNamespace(item, this.meta);
      out += this.#emit('response.function_call_arguments.done', { item_id: item.id, output_index: index, name: item.name, arguments: item.arguments });
    }
    item.status = status;
    return out + this.#emit('response.output_item.done', { output_index: index, item: structuredClone(item) });
  }

  /** Open items closed, then response.completed (or response.incomplete) with usage. */
  protected override completion(finishReason: unknown): string {
    let out = '';
    const end = statusFor(finishReason, this.meta);
    for (const index of [...this.#open].sort((a, b) => a - b)) out += this.#close(index, end.itemStatus);
    const r = this.#response(end.status);
    r.incomplete_details = end.incomplete;
    if (end.status === 'completed') r.completed_at = this.#now();
    return out + this.#emit(end.status === 'completed' ? 'response.completed' : 'response.incomplete', { response: r });
  }

  #response(status: ResponseObject['status']): ResponseObject {
    const r = baseResponse(this.meta, this.#model);
    r.status = status;
    r.output = structuredClone(this.#output);
    if (this.#usage && status !== 'in_progress') r.usage = this.#usage;
    return r;
  }

  #emit(type: string, fields: Obj): string {
    return sseEvent(type, { type, sequence_number: this.#seq++, ...fields });
  }
}
