/**
 * What a client has received of a streamed answer, read from the events
 * written to it (SPEC 13, "A cut stream goes on"): the answer's text so far,
 * about how many tokens carried it, and what a continuation needs to splice
 * its own stream into this one (the ids the client already holds, where its
 * open text block or item is). Reads the client's dialect, not the engine's:
 * a forwarded Messages or Responses stream reaches the entry already
 * translated by its executor, and the entry is the one that continues it.
 *
 * A stream is continuable while all it carried is the answer's plain text:
 * a tool call, reasoning, a refusal, a finish or an error already sent
 * cannot be resumed by prefilling an assistant message, so those end the
 * stream as before. Pure: feed it, read it.
 */
import { isObj, type Obj } from '../chat/index.ts';

/** The streams a cut can be continued in. */
export type ContinuedDialect = 'chat' | 'responses' | 'messages';

export function isContinuedDialect(d: string): d is ContinuedDialect {
  return d === 'chat' || d === 'responses' || d === 'messages';
}

/** One server-sent event as the client got it: its `event:` name (if any) and its data. */
export interface SseEventRead {
  type?: string;
  data: string;
}

/** Splits text into whole events; the part after the last blank line is kept for the next push. */
export class SseSplitter {
  #pending = '';
  #utf8 = new TextDecoder('utf-8');

  push(chunk: Buffer | string): SseEventRead[] {
    this.#pending += typeof chunk === 'string' ? chunk : this.#utf8.decode(chunk, { stream: true });
    const out: SseEventRead[] = [];
    for (;;) {
      const m = /\r?\n\r?\n/.exec(this.#pending);
      if (!m) break;
      const raw = this.#pending.slice(0, m.index);
      this.#pending = this.#pending.slice(m.index + m[0].length);
      let type: string | undefined;
      const data: string[] = [];
      for (const line of raw.split(/\r?\n/)) {
        if (line.startsWith('event:')) type = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(line.startsWith('data: ') ? 6 : 5));
      }
      if (type !== undefined || data.length) out.push({ ...(type !== undefined ? { type } : {}), data: data.join('\n') });
    }
    return out;
  }
}

/** Parsed JSON data of an event, or undefined. */
export function jsonOf(data: string): Obj | undefined {
  try {
    const v = JSON.parse(data) as unknown;
    return isObj(v) ? v : undefined;
  } catch {
    return undefined;
  }
}

/** The open message item of a Responses stream the client holds. */
export interface OpenItem {
  id: string;
  outputIndex: number;
  /** Its output_text part, once the client was told of it. */
  contentIndex?: number;
}

export class Transcript {
  /** The answer's text the client has received. */
  text = '';
  /** Events that carried it: about one token each (engines stream a token per event). */
  tokens = 0;
  /** Why the stream cannot be continued; undefined while it can. */
  stopped?: string;
  /** The client has had an event (its stream's opening): the continuation's is not sent again. */
  opened = false;

  // chat: the chunks' common fields, which the continuation's chunks take over.
  chat?: { id?: unknown; created?: unknown; model?: unknown; system_fingerprint?: unknown };
  // messages: the message's blocks so far and the one open text block.
  blocks = 0;
  openText?: number;
  // responses: the response object the client was given, the last sequence number, the open message item.
  response?: Obj;
  seq = -1;
  item?: OpenItem;

  readonly #split = new SseSplitter();

  constructor(readonly dialect: ContinuedDialect) {}

  /** Bytes or text the client was sent (whole events; a partial one waits for its end). */
  push(out: Buffer | string): void {
    for (const ev of this.#split.push(out)) {
      if (this.stopped !== undefined) return;
      this.opened = true;
      if (ev.type === 'error') this.#stop('the stream had already carried an error');
      else if (this.dialect === 'chat') this.#chat(ev);
      else if (this.dialect === 'messages') this.#messages(ev);
      else this.#responses(ev);
    }
  }

  #stop(why: string): void {
    this.stopped ??= why;
  }

  #chat(ev: SseEventRead): void {
    if (ev.data.trim() === '[DONE]') return this.#stop('the stream had ended');
    const c = jsonOf(ev.data);
    if (!c) return;
    if (c.error !== undefined) return this.#stop('the stream had already carried an error');
    this.chat ??= { id: c.id, created: c.created, model: c.model, system_fingerprint: c.system_fingerprint };
    const choices = Array.isArray(c.choices) ? c.choices : [];
    if (choices.length > 1) return this.#stop('the answer has more than one choice');
    const choice = choices[0];
    if (!isObj(choice)) return;
    if (choice.finish_reason !== null && choice.finish_reason !== undefined) return this.#stop('the answer had finished');
    const d = choice.delta;
    if (!isObj(d)) return;
    if (present(d.tool_calls) || present(d.reasoning_content) || present(d.refusal) || present(d.function_call)) return this.#stop('the answer had streamed more than text');
    if (typeof d.content === 'string' && d.content !== '') {
      this.text += d.content;
      this.tokens++;
    }
  }

  #messages(ev: SseEventRead): void {
    const e = jsonOf(ev.data);
    if (!e) return;
    switch (ev.type ?? e.type) {
      case 'content_block_start': {
        const block = e.content_block;
        const index = typeof e.index === 'number' ? e.index : this.blocks;
        this.blocks = Math.max(this.blocks, index + 1);
        if (isObj(block) && block.type === 'text' && (typeof block.text !== 'string' || block.text === '')) this.openText = index;
        else this.#stop('the answer had streamed more than text');
        return;
      }
      case 'content_block_delta': {
        const d = e.delta;
        if (!isObj(d) || d.type !== 'text_delta' || e.index !== this.openText) return this.#stop('the answer had streamed more than text');
        if (typeof d.text === 'string' && d.text !== '') {
          this.text += d.text;
          this.tokens++;
        }
        return;
      }
      case 'content_block_stop':
        if (e.index === this.openText) this.openText = undefined;
        return;
      case 'message_delta':
      case 'message_stop':
        return this.#stop('the answer had finished');
    }
  }

  #responses(ev: SseEventRead): void {
    const e = jsonOf(ev.data);
    if (!e) return;
    if (typeof e.sequence_number === 'number') this.seq = e.sequence_number;
    const type = ev.type ?? e.type;
    switch (type) {
      case 'response.created':
        if (isObj(e.response)) this.response = e.response;
        return;
      case 'response.in_progress':
        return;
      case 'response.output_item.added': {
        const item = e.item;
        if (!isObj(item) || item.type !== 'message' || this.item || typeof item.id !== 'string' || typeof e.output_index !== 'number') return this.#stop('the answer had streamed more than text');
        this.item = { id: item.id, outputIndex: e.output_index };
        return;
      }
      case 'response.content_part.added': {
        const part = e.part;
        if (!this.item || e.item_id !== this.item.id || !isObj(part) || part.type !== 'output_text' || typeof e.content_index !== 'number') return this.#stop('the answer had streamed more than text');
        this.item.contentIndex = e.content_index;
        return;
      }
      case 'response.output_text.delta':
        if (!this.item || e.item_id !== this.item.id || e.content_index !== this.item.contentIndex) return this.#stop('the answer had streamed more than text');
        if (typeof e.delta === 'string' && e.delta !== '') {
          this.text += e.delta;
          this.tokens++;
        }
        return;
      default:
        // Anything else (a part or item done, the response completed or failed) means the answer was ending.
        return this.#stop(type === undefined ? 'the stream carried an unnamed event' : `the stream had sent ${type}`);
    }
  }
}

function present(v: unknown): boolean {
  return v !== undefined && v !== null && v !== '' && !(Array.isArray(v) && v.length === 0);
}
