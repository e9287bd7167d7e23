/**
 * A pass-through scanner for OpenAI server-sent events. It never holds
 * bytes back beyond the end of the current event, notices the first chunk
 * that carries content (for TTFT), reads `usage`, and can drop the usage-only
 * chunk the node asked for when the client did not.
 */

export interface SseObservation {
  firstContentAt?: number;
  promptTokens?: number;
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

export class SseScanner {
  #pending = '';
  readonly seen: SseObservation = {};

  constructor(
    private readonly stripUsage: boolean,
    private readonly clock: () => number = () => performance.now(),
  ) {}

  /** Feed bytes; returns the text to pass on now (whole events only). */
  push(chunk: Buffer): string {
    this.#pending += chunk.toString('utf8');
    let out = '';
    for (;;) {
      const m = /\r?\n\r?\n/.exec(this.#pending);
      if (!m) break;
      const event = this.#pending.slice(0, m.index + m[0].length);
      this.#pending = this.#pending.slice(m.index + m[0].length);
      out += this.#inspect(event);
    }
    return out;
  }

  /** Whatever is left at the end of the stream. */
  flush(): string {
    const rest = this.#pending;
    this.#pending = '';
    return rest;
  }

  #inspect(event: string): string {
    const needContent = this.seen.firstContentAt === undefined;
    const mayHaveUsage = event.includes('"usage"');
    if (!needContent && !mayHaveUsage) return event;
    const data = event
      .split(/\r?\n/)
      .filter((l) => l.startsWith('data:'))
      .map((l) => l.slice(5).trimStart())
      .join('\n');
    if (!data || data === '[DONE]') return event;
    let parsed: { choices?: []; usage?: { prompt_tokens?: number } } | undefined;
    try {
      parsed = JSON.parse(data);
    } catch {
      return event;
    }
    if (!parsed || typeof parsed !== 'object') return event;
    if (needContent && hasContent(parsed)) this.seen.firstContentAt = this.clock();
    if (parsed.usage && typeof parsed.usage.prompt_tokens === 'number') {
      this.seen.promptTokens = parsed.usage.prompt_tokens;
      if (this.stripUsage && (parsed.choices?.length ?? 0) === 0) return '';
    }
    return event;
  }
}
