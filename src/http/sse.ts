/**
 * A pass-through scanner for OpenAI server-sent events, on bytes. It never
 * holds bytes back beyond the end of the current event and never decodes a
 * partial event, so a multi-byte character split across reads passes
 * intact. It notices the first chunk that carries content (for TTFT), reads
 * `usage`, and can drop the usage-only chunk the node asked for when the
 * client did not. Once the first content chunk is seen, only events that
 * contain the bytes `"usage"` are decoded at all.
 */

export interface SseObservation {
  firstContentAt?: number;
  promptTokens?: number;
  cachedTokens?: number;
  /** llama-server's `timings`: prompt tokens processed, and (newer builds) reused from the slot. */
  promptN?: number;
  cacheN?: number;
}

const CONTENT_KEYS = ['content', 'reasoning_content', 'tool_calls', 'refusal'];
const USAGE = Buffer.from('"usage"');
const TIMINGS = Buffer.from('"timings"');
const LF = 0x0a;
const CR = 0x0d;

function hasContent(chunk: { choices?: { delta?: Record<string, unknown>; text?: unknown }[] }): boolean {
  for (const c of chunk.choices ?? []) {
    if (typeof c.text === 'string' && c.text.length > 0) return true;
    const d = c.delta;
    if (d) for (const k of CONTENT_KEYS) if (d[k] !== undefined && d[k] !== null && d[k] !== '') return true;
  }
  return false;
}

/** The end (exclusive) of the first blank line at or after `from`, or -1. */
function eventEnd(buf: Buffer, from: number): number {
  for (let i = buf.indexOf(LF, from); i >= 0; i = buf.indexOf(LF, i + 1)) {
    // "\n\n" or "\n\r\n"
    if (buf[i + 1] === LF) return i + 2;
    if (buf[i + 1] === CR && buf[i + 2] === LF) return i + 3;
  }
  return -1;
}

export class SseScanner {
  #pending: Buffer | undefined;
  readonly seen: SseObservation = {};

  constructor(
    private readonly stripUsage: boolean,
    private readonly clock: () => number = () => performance.now(),
  ) {}

  /** Feed bytes; returns the bytes to pass on now (whole events only), or undefined when there are none. */
  push(chunk: Buffer): Buffer | undefined {
    const buf = this.#pending ? Buffer.concat([this.#pending, chunk]) : chunk;
    // Search only where a boundary can newly appear.
    const searchFrom = this.#pending ? Math.max(0, this.#pending.length - 2) : 0;
    this.#pending = undefined;
    let start = 0;
    let end = eventEnd(buf, searchFrom);
    if (end < 0) {
      this.#pending = buf;
      return undefined;
    }
    const out: Buffer[] = [];
    let keepFrom = 0;
    while (end >= 0) {
      const event = buf.subarray(start, end);
      if (this.#drop(event)) {
        if (start > keepFrom) out.push(buf.subarray(keepFrom, start));
        keepFrom = end;
      }
      start = end;
      end = eventEnd(buf, start);
    }
    if (start > keepFrom) out.push(buf.subarray(keepFrom, start));
    if (start < buf.length) this.#pending = Buffer.from(buf.subarray(start));
    if (out.length === 0) return undefined;
    return out.length === 1 ? out[0] : Buffer.concat(out);
  }

  /** Whatever is left at the end of the stream. */
  flush(): Buffer | undefined {
    const rest = this.#pending;
    this.#pending = undefined;
    return rest;
  }

  /** Inspect one whole event; true when it is the usage-only chunk to drop. */
  #drop(event: Buffer): boolean {
    const needContent = this.seen.firstContentAt === undefined;
    const mayHaveUsage = event.includes(USAGE) || event.includes(TIMINGS);
    if (!needContent && !mayHaveUsage) return false;
    const data = event
      .toString('utf8')
      .split(/\r?\n/)
      .filter((l) => l.startsWith('data:'))
      .map((l) => l.slice(5).trimStart())
      .join('\n');
    if (!data || data === '[DONE]') return false;
    let parsed: { choices?: []; usage?: { prompt_tokens?: number; prompt_tokens_details?: { cached_tokens?: number } }; timings?: { prompt_n?: unknown; cache_n?: unknown } } | undefined;
    try {
      parsed = JSON.parse(data);
    } catch {
      return false;
    }
    if (!parsed || typeof parsed !== 'object') return false;
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
      if (this.stripUsage && (parsed.choices?.length ?? 0) === 0) return true;
    }
    return false;
  }
}
