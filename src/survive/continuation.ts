/**
 * Continuing a cut stream (SPEC 13): the request another host gets (the
 * client's own, with the answer streamed so far as a final assistant message
 * to continue, in the client's API), and the rewriting of that host's stream
 * into the one the client already holds (`Splice`): no second opening, the
 * ids, indices and sequence numbers the client knows, the texts of closing
 * events whole, and usage once. Pure.
 *
 * The request stays in the client's API so the host that takes it serves it
 * as it serves any other (its engine native, or translated by that host):
 * llama-server continues a final assistant message (`--prefill-assistant`,
 * on by default), as Anthropic's API does.
 */
import { isObj, sseEvent, type Obj } from '../chat/index.ts';
import type { AnswerTranslator } from '../http/relay.ts';
import { jsonOf, SseSplitter, type ContinuedDialect, type Transcript } from './transcript.ts';

/** What the continuation asks for, or why there is none. */
export type ContinuationBody = { ok: true; body: Buffer } | { ok: false; why: string };

/** The output bounds of each API, lowered by what was already streamed. */
const OUTPUT_FIELDS: Record<ContinuedDialect, string[]> = {
  chat: ['max_tokens', 'max_completion_tokens'],
  messages: ['max_tokens'],
  responses: ['max_output_tokens'],
};

/**
 * The client's request (`body`, JSON) continued after the text `t` holds: that text as the answer's start (a final
 * assistant message, merged into one the client itself ended with), the output bound less what was streamed, and for
 * chat usage asked for (the splice learns the count from it, and drops it when the client did not ask).
 */
export function continuationBody(body: Buffer, t: Transcript): ContinuationBody {
  if (t.stopped !== undefined) return { ok: false, why: t.stopped };
  let doc: unknown;
  try {
    doc = JSON.parse(body.toString('utf8'));
  } catch {
    return { ok: false, why: 'the request is not JSON' };
  }
  if (!isObj(doc)) return { ok: false, why: 'the request is not a JSON object' };
  if (t.dialect === 'chat' && typeof doc.n === 'number' && doc.n > 1) return { ok: false, why: 'the request asks for more than one choice' };
  if (t.text !== '') {
    if (t.dialect === 'responses') {
      if (typeof doc.input === 'string') doc.input = [{ role: 'user', content: doc.input }];
      if (!Array.isArray(doc.input)) return { ok: false, why: 'the request has no input to continue' };
      doc.input.push({ type: 'message', role: 'assistant', content: t.text });
    } else {
      if (!Array.isArray(doc.messages)) return { ok: false, why: 'the request has no messages to continue' };
      appendAssistant(doc.messages, t.text);
    }
  }
  for (const f of OUTPUT_FIELDS[t.dialect]) if (typeof doc[f] === 'number') doc[f] = Math.max(1, (doc[f] as number) - t.tokens);
  doc.stream = true;
  if (t.dialect === 'chat') doc.stream_options = { ...(isObj(doc.stream_options) ? doc.stream_options : {}), include_usage: true };
  return { ok: true, body: Buffer.from(JSON.stringify(doc)) };
}

/** The answer so far as the conversation's last assistant message; a client's own prefill is continued, not repeated. */
function appendAssistant(messages: unknown[], text: string): void {
  const last = messages[messages.length - 1];
  if (isObj(last) && last.role === 'assistant' && !last.tool_calls) {
    if (typeof last.content === 'string') {
      last.content += text;
      return;
    }
    if (Array.isArray(last.content)) {
      const block = last.content[last.content.length - 1];
      if (isObj(block) && block.type === 'text' && typeof block.text === 'string') {
        block.text += text;
        return;
      }
    }
  }
  messages.push({ role: 'assistant', content: text });
}

/** Usage the continuation reports, as the client's: its prompt held the `k` tokens streamed before, which are output. */
function movedChatUsage(u: Obj, k: number): Obj {
  const out = { ...u };
  if (typeof u.prompt_tokens === 'number') out.prompt_tokens = Math.max(0, u.prompt_tokens - k);
  if (typeof u.completion_tokens === 'number') out.completion_tokens = u.completion_tokens + k;
  const details = u.prompt_tokens_details;
  if (isObj(details) && typeof details.cached_tokens === 'number' && typeof out.prompt_tokens === 'number') out.prompt_tokens_details = { ...details, cached_tokens: Math.min(details.cached_tokens, out.prompt_tokens) };
  return out;
}

function movedUsage(u: unknown, k: number, input: string, output: string): unknown {
  if (!isObj(u)) return u;
  const out: Obj = { ...u };
  if (typeof u[input] === 'number') out[input] = Math.max(0, (u[input] as number) - k);
  if (typeof u[output] === 'number') out[output] = (u[output] as number) + k;
  return out;
}

/**
 * Today's llama-server streams the continued assistant text back before what it adds (its first delta holds the whole
 * prefill); other servers, and Anthropic's API, send only what follows. The continuation's text is held while it could
 * still be that echo: once it holds the whole answer so far it was one, and that part is dropped; once it differs, it
 * was not, and what was held goes on.
 */
export class EchoFilter {
  #held = '';
  #settled: boolean;
  /** The host echoed the answer's start (its whole texts then carry it too). */
  echoed = false;

  constructor(private readonly before: string) {
    this.#settled = before === '';
  }

  /** The part of a continuation's text delta the client gets ('' while it may still be the echo). */
  take(delta: string): string {
    if (this.#settled) return delta;
    const seen = this.#held + delta;
    if (seen.startsWith(this.before)) {
      this.#settled = true;
      this.echoed = true;
      this.#held = '';
      return seen.slice(this.before.length);
    }
    if (this.before.startsWith(seen)) {
      this.#held = seen;
      return '';
    }
    this.#settled = true;
    this.#held = '';
    return seen;
  }

  /** A whole text of the continuation (a done event's) as the client's: the answer's start once, then the rest. */
  whole(text: string): string {
    return this.echoed && text.startsWith(this.before) ? text : this.before + text;
  }
}

/** The events that end a cut stream that is not continued: the client's API's error, as its executor would have sent it. */
export function cutEnding(t: Transcript, message: string): string {
  switch (t.dialect) {
    case 'chat':
      return `event: error\ndata: ${JSON.stringify({ error: { message, type: 'server_error', code: 'engine_failed' } })}\n\n`;
    case 'messages':
      return sseEvent('error', { type: 'error', error: { type: 'api_error', message } });
    case 'responses': {
      let out = '';
      if (t.response) {
        const r = { ...t.response, status: 'failed', error: { code: 'server_error', message } };
        out += sseEvent('response.failed', { type: 'response.failed', sequence_number: ++t.seq, response: r });
      }
      return out + sseEvent('error', { type: 'error', sequence_number: ++t.seq, code: 'server_error', message, param: null, error: { message, type: 'server_error', code: 'server_error' } });
    }
  }
}

/**
 * The continuation's stream rewritten into the client's: the relay's stream translator (http/relay.ts) for a run whose
 * headers the client already has. `start` writes nothing; each push takes whole events of the continuation (in the
 * client's API) and returns what the client gets.
 */
export class Splice {
  readonly #split = new SseSplitter();
  readonly #k: number;
  // messages: where the continuation's block 0 lands in the client's message, once known.
  #offset?: number;
  // responses: the continuation's message item (its id and index) and the offset of its other items.
  #contItem?: { id: string; index: number };
  #itemOffset?: number;
  #finished = false;
  #failed = false;
  readonly #echo: EchoFilter;

  /** `wantsUsage`: the client asked for usage in its chat stream (otherwise the usage the splice asked for is dropped). */
  constructor(
    private readonly t: Transcript,
    private readonly wantsUsage: boolean,
  ) {
    this.#k = t.tokens;
    this.#echo = new EchoFilter(t.text);
  }

  /** True once the continuation's end (or its error) went to the client. */
  get finished(): boolean {
    return this.#finished;
  }

  /** True once the continuation's own end went to the client: the answer is whole. */
  get completed(): boolean {
    return this.#finished && !this.#failed;
  }

  /** The client's stream ends with its API's error. */
  #fail(message: string): string {
    if (this.#finished) return '';
    this.#finished = true;
    this.#failed = true;
    return cutEnding(this.t, message);
  }

  start(): string {
    return '';
  }

  push(chunk: Buffer | string): string {
    let out = '';
    for (const ev of this.#split.push(chunk)) out += this.#event(ev.type, ev.data);
    return out;
  }

  end(): string {
    return this.#fail('the continuation of the cut stream ended before its answer was complete');
  }

  error(message: string): string {
    return this.#fail(message);
  }

  #event(type: string | undefined, data: string): string {
    if (this.#finished) return '';
    if (type === 'error') return this.#fail(errorText(data));
    // Cut before the client had an event: it holds nothing to splice into, and gets the continuation as it is.
    if (!this.t.opened) return this.#whole(type, data);
    switch (this.t.dialect) {
      case 'chat':
        return this.#chat(data);
      case 'messages':
        return this.#messages(type, data);
      case 'responses':
        return this.#responses(type, data);
    }
  }

  #whole(type: string | undefined, data: string): string {
    const name = type ?? jsonOf(data)?.type;
    if (data.trim() === '[DONE]' || name === 'message_stop' || name === 'response.completed' || name === 'response.incomplete') this.#finished = true;
    if (name === 'response.failed') this.#failed = this.#finished = true;
    const c = this.t.dialect === 'chat' ? jsonOf(data) : undefined;
    // The usage the splice asked for, which the client did not.
    if (c && isObj(c.usage) && !this.wantsUsage) {
      if (!Array.isArray(c.choices) || c.choices.length === 0) return '';
      delete c.usage;
      return `data: ${JSON.stringify(c)}\n\n`;
    }
    return `${type !== undefined ? `event: ${type}\n` : ''}data: ${data}\n\n`;
  }

  #chat(data: string): string {
    if (data.trim() === '[DONE]') {
      this.#finished = true;
      return 'data: [DONE]\n\n';
    }
    const c = jsonOf(data);
    if (!c) return '';
    if (c.error !== undefined) return this.#fail(errorText(data));
    // The client's chunks keep one id, creation time and model.
    const known = this.t.chat;
    if (known) for (const f of ['id', 'created', 'model'] as const) if (known[f] !== undefined) c[f] = known[f];
    const choices = Array.isArray(c.choices) ? c.choices : [];
    let carries = false;
    for (const choice of choices) {
      if (!isObj(choice)) continue;
      const d = choice.delta;
      if (isObj(d)) {
        // The role was said at the stream's start.
        delete d.role;
        if (typeof d.content === 'string') d.content = this.#echo.take(d.content);
        for (const k in d) if (d[k] !== null && d[k] !== '') carries = true;
      }
      if (choice.finish_reason !== null && choice.finish_reason !== undefined) carries = true;
    }
    if (isObj(c.usage)) {
      if (this.wantsUsage) {
        c.usage = movedChatUsage(c.usage, this.#k);
        carries = true;
      } else {
        delete c.usage;
      }
    }
    // A chunk left with nothing for the client (the continuation's opening role, the usage it did not ask for) is not sent.
    if (!carries) return '';
    return `data: ${JSON.stringify(c)}\n\n`;
  }

  #messages(type: string | undefined, data: string): string {
    const e = jsonOf(data);
    if (!e) return '';
    const name = type ?? (typeof e.type === 'string' ? e.type : undefined);
    switch (name) {
      case 'message_start':
        return '';
      case 'content_block_start': {
        let out = '';
        if (this.#offset === undefined) {
          const open = this.t.openText;
          const block = e.content_block;
          if (open !== undefined && e.index === 0 && isObj(block) && block.type === 'text') {
            // The client's open text block goes on: this one's start is not sent, its deltas land in it.
            this.#offset = open;
            return '';
          }
          if (open !== undefined) {
            // The continuation begins with something else: the client's text block closes first.
            out += sseEvent('content_block_stop', { type: 'content_block_stop', index: open });
            this.#offset = open + 1;
          } else this.#offset = this.t.blocks;
        }
        return out + this.#moved('content_block_start', e);
      }
      case 'content_block_delta': {
        const d = e.delta;
        if (isObj(d) && d.type === 'text_delta' && typeof d.text === 'string') {
          d.text = this.#echo.take(d.text);
          if (d.text === '') return '';
        }
        return this.#moved(name, e);
      }
      case 'content_block_stop':
        return this.#moved(name, e);
      case 'message_delta':
        e.usage = movedUsage(e.usage, this.#k, 'input_tokens', 'output_tokens');
        return sseEvent(name, e);
      case 'message_stop':
        this.#finished = true;
        return sseEvent(name, e);
      default:
        return name === undefined ? '' : sseEvent(name, e);
    }
  }

  #moved(name: string, e: Obj): string {
    if (typeof e.index === 'number') e.index += this.#offset ?? this.t.openText ?? this.t.blocks;
    return sseEvent(name, e);
  }

  #responses(type: string | undefined, data: string): string {
    const e = jsonOf(data);
    if (!e) return '';
    const name = type ?? (typeof e.type === 'string' ? e.type : undefined);
    if (name === undefined || name === 'response.created' || name === 'response.in_progress') return '';
    const open = this.t.item;
    if (name === 'response.output_item.added' && this.#itemOffset === undefined) {
      const item = e.item;
      if (open && isObj(item) && item.type === 'message' && typeof item.id === 'string' && typeof e.output_index === 'number') {
        // The client's message item goes on: this one's opening is not sent, its events land in the client's.
        this.#contItem = { id: item.id, index: e.output_index };
        this.#itemOffset = open.outputIndex - e.output_index;
        return '';
      }
      this.#itemOffset = open ? open.outputIndex + 1 : 0;
    }
    const mine = this.#contItem !== undefined && e.item_id === this.#contItem.id;
    if (mine) {
      e.item_id = open!.id;
      if (name === 'response.content_part.added' && open!.contentIndex !== undefined && e.content_index === 0) return '';
      if (e.content_index === 0 && open!.contentIndex !== undefined) e.content_index = open!.contentIndex;
      if (name === 'response.output_text.delta' && typeof e.delta === 'string') {
        e.delta = this.#echo.take(e.delta);
        if (e.delta === '') return '';
      }
      if (name === 'response.output_text.done' && typeof e.text === 'string') e.text = this.#echo.whole(e.text);
      if (name === 'response.content_part.done' && isObj(e.part) && typeof e.part.text === 'string') e.part = { ...e.part, text: this.#echo.whole(e.part.text) };
    }
    if (typeof e.output_index === 'number') e.output_index += this.#itemOffset ?? 0;
    if (name === 'response.output_item.done' && isObj(e.item)) e.item = this.#item(e.item);
    if (name === 'response.failed') {
      // Its error event follows; the client gets one failure, in its own response's terms.
      const r = isObj(e.response) && isObj(e.response.error) && typeof e.response.error.message === 'string' ? e.response.error.message : undefined;
      return this.#fail(r ? `the continuation of the cut stream failed: ${r}` : 'the continuation of the cut stream failed');
    }
    if (name === 'response.completed' || name === 'response.incomplete') {
      e.response = this.#response(e.response);
      this.#finished = true;
    }
    e.sequence_number = ++this.t.seq;
    return sseEvent(name, e);
  }

  /** An output item of the continuation as the client knows it (its message: the client's id, the whole text). */
  #item(item: Obj): Obj {
    if (!this.#contItem || item.id !== this.#contItem.id) return item;
    const content = Array.isArray(item.content) ? item.content.map((p, i) => (i === 0 && isObj(p) && typeof p.text === 'string' ? { ...p, text: this.#echo.whole(p.text) } : p)) : item.content;
    return { ...item, id: this.t.item!.id, content };
  }

  /** The response object that ends the stream: the client's (its id, creation, settings), with the continuation's output, status and usage. */
  #response(r: unknown): unknown {
    if (!isObj(r)) return r;
    const base = this.t.response ?? r;
    const output = Array.isArray(r.output) ? r.output.map((it) => (isObj(it) ? this.#item(it) : it)) : r.output;
    const out: Obj = { ...base, status: r.status, output, error: r.error ?? null, incomplete_details: r.incomplete_details ?? null, completed_at: r.completed_at ?? null };
    if (r.usage !== undefined) out.usage = movedUsage(r.usage, this.#k, 'input_tokens', 'output_tokens');
    return out;
  }
}

/** The message of an error event's data, in OpenAI's or Anthropic's shape. */
function errorText(data: string): string {
  const e = jsonOf(data);
  const inner = e && isObj(e.error) ? e.error : e;
  const m = inner && typeof inner.message === 'string' ? inner.message : undefined;
  return m ? `the continuation of the cut stream failed: ${m}` : 'the continuation of the cut stream failed';
}

/**
 * The relay's translator for a continuation: the splice, after the host's own translation of its engine's chat stream
 * into the client's API when it has one (a Messages or Responses request run on a chat-only engine).
 */
export function spliceTranslator(splice: Splice, inner?: AnswerTranslator): AnswerTranslator {
  const s = inner?.stream;
  return {
    stream: {
      start: () => splice.push(s ? s.start() : ''),
      push: (chunk) => splice.push(s ? s.push(chunk) : chunk),
      end: () => (s ? splice.push(s.end()) : '') + splice.end(),
      error: (message) => splice.error(message),
      ...(s?.keepAlive ? { keepAlive: s.keepAlive } : {}),
    },
    // A continuation is only ever a stream (the relay refuses anything else when continuing).
    whole: () => ({ status: 502, body: Buffer.from('{"error":{"message":"a continuation answered without a stream","type":"server_error","code":"engine_failed"}}') }),
  };
}
