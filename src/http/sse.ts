/**
 * A pass-through scanner for OpenAI server-sent events, on bytes. It never
 * holds bytes back beyond the end of the current event and never decodes a
 * partial event, so a multi-byte character split across reads passes
 * intact. It notices the first chunk that carries content (for TTFT), reads
 * `usage`, and can drop the usage-only chunk the node asked for when the
 * client did not. Once the first content chunk is seen, only events that
 * name `"usage"` or `"timings"` are parsed; with `reply` on, the others
 * give it their content string alone (chat/reply.ts), so the executor can
 * record the assistant's reply with its prompt.
 */
import { eventData, ReplyCollector } from '../chat/index.ts';


export interface SseObservation {
  firstContentAt?: number;
  promptTokens?: number;
  cachedTokens?: number;
  /** `usage.completion_tokens` (history's tokens out). */
  completionTokens?: number;
  /** llama-server's `timings`: prompt tokens processed, and (newer builds) reused from the slot. */
  promptN?: number;
  cacheN?: number;
  /** Whole events passed on from the first content on: about one token each, what a stream cut short is settled at. */
  streamed?: number;
}

const CONTENT_KEYS = ['content', 'reasoning_content', 'tool_calls', 'refusal'];

function hasContent(chunk: { choices?: { delta?: Record<string, unknown>; text?: unknown }[] }): boolean {
  for (const c of chunk.choices ?? []) {
    if (typeof c.text === 'string' && c.text.length > 0) return true;
    const d = c.delta;
    if (d) for (const k of CONTENT_KEYS) if (d[k] !== undefined && d[k] !== null && d[k] !== '') return true;
  }
  return false;
}

/*
 * The scanner searches a latin1 view of each buffer (one character per byte, so
 * offsets are byte offsets): a string search is a JIT intrinsic, where each
 * Buffer.indexOf is a call into C++, and a stream asked a dozen of them per
 * event. Bytes are decoded as UTF-8 only where a value is read.
 */

/** The end (exclusive) of the first blank line at or after `from`, or -1. */
function eventEnd(text: string, from: number): number {
  for (let i = text.indexOf('\n', from); i >= 0; i = text.indexOf('\n', i + 1)) {
    // "\n\n" or "\n\r\n"
    const next = text.charCodeAt(i + 1);
    if (next === 0x0a) return i + 2;
    if (next === 0x0d && text.charCodeAt(i + 2) === 0x0a) return i + 3;
  }
  return -1;
}

/** The data of an event of one `data:` line and its blank line (what engines send), decoded, without splitting it; undefined otherwise. */
function singleData(ev: string, buf: Buffer, at: number): string | undefined {
  if (!ev.startsWith('data:')) return undefined;
  const lf = ev.indexOf('\n');
  if (lf < 0) return undefined;
  const oneLine = (ev.charCodeAt(lf + 1) === 0x0a && ev.length === lf + 2) || (ev.charCodeAt(lf + 1) === 0x0d && ev.charCodeAt(lf + 2) === 0x0a && ev.length === lf + 3);
  if (!oneLine) return undefined;
  return buf.toString('utf8', at + 5, at + (lf > 0 && ev.charCodeAt(lf - 1) === 0x0d ? lf - 1 : lf)).trimStart();
}

/** The next index at or after `from` of `needle`, found again only once `from` has passed the last one. */
class NextOf {
  #at = -2;
  constructor(
    private readonly text: string,
    private readonly needle: string,
  ) {}
  /** Is there one in [from, to)? */
  within(from: number, to: number): boolean {
    if (this.#at === -1) return false;
    if (this.#at < from) this.#at = this.text.indexOf(this.needle, from);
    return this.#at >= 0 && this.#at < to;
  }
}

export class SseScanner {
  #pending: Buffer | undefined;
  readonly seen: SseObservation = {};

  /** The assistant's reply, gathered (only when asked for). */
  readonly reply: ReplyCollector | undefined;

  constructor(
    private readonly stripUsage: boolean,
    private readonly clock: () => number = () => performance.now(),
    reply = false,
  ) {
    this.reply = reply ? new ReplyCollector() : undefined;
  }

  /** Feed bytes; returns the bytes to pass on now (whole events only), or undefined when there are none. */
  push(chunk: Buffer): Buffer | undefined {
    const buf = this.#pending ? Buffer.concat([this.#pending, chunk]) : chunk;
    // Search only where a boundary can newly appear.
    const searchFrom = this.#pending ? Math.max(0, this.#pending.length - 2) : 0;
    this.#pending = undefined;
    const text = buf.toString('latin1');
    let start = 0;
    let end = eventEnd(text, searchFrom);
    if (end < 0) {
      this.#pending = buf;
      return undefined;
    }
    // Most events pass whole: the parts around a dropped one are collected only once one is dropped.
    let out: Buffer[] | undefined;
    let keepFrom = 0;
    // Once the first content is seen only events naming usage or timings are parsed; with the reply
    // gathered, the others give it their content string alone; without it, they are not looked at.
    const usage = new NextOf(text, '"usage"');
    const timings = new NextOf(text, '"timings"');
    while (end >= 0) {
      const needContent = this.seen.firstContentAt === undefined;
      const named = usage.within(start, end) || timings.within(start, end);
      if (needContent || named) {
        if (this.#drop(text.slice(start, end), buf, start)) {
          if (start > keepFrom) (out ??= []).push(buf.subarray(keepFrom, start));
          out ??= [];
          keepFrom = end;
        }
      } else if (this.reply && !this.reply.done) this.reply.eventAt(text.slice(start, end), buf, start);
      if (this.seen.firstContentAt !== undefined) this.seen.streamed = (this.seen.streamed ?? 0) + 1;
      start = end;
      end = eventEnd(text, start);
    }
    if (start < buf.length) this.#pending = Buffer.from(buf.subarray(start));
    if (!out) return start > 0 ? (start === buf.length ? buf : buf.subarray(0, start)) : undefined;
    if (start > keepFrom) out.push(buf.subarray(keepFrom, start));
    if (out.length === 0) return undefined;
    return out.length === 1 ? out[0] : Buffer.concat(out);
  }

  /** Whatever is left at the end of the stream. */
  flush(): Buffer | undefined {
    const rest = this.#pending;
    this.#pending = undefined;
    return rest;
  }

  /** Inspect one whole event (`ev`, its latin1 view, at `at` in `buf`); true when it is the usage-only chunk to drop. */
  #drop(ev: string, buf: Buffer, at: number): boolean {
    const data = singleData(ev, buf, at) ?? eventData(buf.subarray(at, at + ev.length));
    if (!data || data === '[DONE]') return false;
    const needContent = this.seen.firstContentAt === undefined;
    let parsed: { choices?: []; usage?: { prompt_tokens?: number; completion_tokens?: number; prompt_tokens_details?: { cached_tokens?: number } }; timings?: { prompt_n?: unknown; cache_n?: unknown } } | undefined;
    try {
      parsed = JSON.parse(data);
    } catch {
      this.reply?.lose();
      return false;
    }
    if (!parsed || typeof parsed !== 'object') return false;
    this.reply?.chunk(parsed);
    if (needContent && hasContent(parsed)) this.seen.firstContentAt = this.clock();
    const t = parsed.timings;
    if (t && typeof t === 'object') {
      if (typeof t.prompt_n === 'number') this.seen.promptN = t.prompt_n;
      if (typeof t.cache_n === 'number') this.seen.cacheN = t.cache_n;
    }
    if (parsed.usage && typeof parsed.usage.prompt_tokens === 'number') {
      this.seen.promptTokens = parsed.usage.prompt_tokens;
      const cached = parsed.usage.prompt_tokens_details?.cached_tokens;
      if (typeof cached === 'number') this.seen.cachedTokens = cached;
      if (typeof parsed.usage.completion_tokens === 'number') this.seen.completionTokens = parsed.usage.completion_tokens;
      if (this.stripUsage && (parsed.choices?.length ?? 0) === 0) return true;
    }
    return false;
  }
}
