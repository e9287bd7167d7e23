/**
 * Server-sent events on the translated path: the one decoder of a chat
 * engine's stream (bytes → its `data:` payloads: parsed JSON, or `'[DONE]'`),
 * and the writer of one event for the client (Responses and Messages events
 * alike). Pure (a UTF-8 decoder and a buffer), bounded: an event longer than
 * `maxEventBytes` without its blank line is an error.
 */
import { StringDecoder } from 'node:string_decoder';

export type ChatSseData = { kind: 'data'; value: unknown } | { kind: 'done' } | { kind: 'invalid'; reason: string };

export const DEFAULT_MAX_EVENT_BYTES = 8 * 1024 * 1024;

export class ChatSseDecoder {
  #utf8 = new StringDecoder('utf8');
  #pending = '';
  #broken = false;

  constructor(private readonly maxEventBytes = DEFAULT_MAX_EVENT_BYTES) {}

  /** Feed bytes (or text); returns the payloads of the events completed by them. */
  push(chunk: Buffer | string): ChatSseData[] {
    if (this.#broken) return [];
    this.#pending += typeof chunk === 'string' ? chunk : this.#utf8.write(chunk);
    const out: ChatSseData[] = [];
    for (;;) {
      const m = /\r?\n\r?\n|\r\r/.exec(this.#pending);
      if (!m) break;
      const event = this.#pending.slice(0, m.index);
      this.#pending = this.#pending.slice(m.index + m[0].length);
      const d = decodeEvent(event);
      if (d) out.push(d);
    }
    if (this.#pending.length > this.maxEventBytes) {
      this.#broken = true;
      this.#pending = '';
      out.push({ kind: 'invalid', reason: `an event of the engine's stream is longer than ${this.maxEventBytes} bytes` });
    }
    return out;
  }

  /** The end of the bytes: a last event without its blank line still counts. */
  end(): ChatSseData[] {
    if (this.#broken) return [];
    const rest = this.#pending + this.#utf8.end();
    this.#pending = '';
    const d = rest.trim() === '' ? undefined : decodeEvent(rest);
    return d ? [d] : [];
  }
}

/** A raw event's `data:` lines joined, each value without its leading spaces (what the relay and the reply read). */
export function eventData(event: Buffer): string {
  return event
    .toString('utf8')
    .split(/\r?\n/)
    .filter((l) => l.startsWith('data:'))
    .map((l) => l.slice(5).trimStart())
    .join('\n');
}

function decodeEvent(event: string): ChatSseData | undefined {
  const data = event
    .split(/\r?\n|\r/)
    .filter((l) => l.startsWith('data:'))
    .map((l) => (l.startsWith('data: ') ? l.slice(6) : l.slice(5)))
    .join('\n');
  if (data === '') return undefined; // comments, keep-alives, event-only blocks
  if (data.trim() === '[DONE]') return { kind: 'done' };
  try {
    return { kind: 'data', value: JSON.parse(data) };
  } catch {
    return { kind: 'invalid', reason: `the engine's stream carried an event that is not JSON: ${data.slice(0, 120)}` };
  }
}

/** One server-sent event for the client, as text. */
export function sseEvent(type: string, data: unknown): string {
  return `event: ${type}\ndata: ${JSON.stringify(data)}\n\n`;
}
