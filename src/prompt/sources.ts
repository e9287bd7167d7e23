/**
 * Where the prefix chain reads a prompt from: the raw request body, walked
 * within a byte bound (only the elements inside the bound are parsed, one
 * at a time, so a 30 MiB body costs what its first MiB costs), or an object
 * already parsed (the sim engine). Pure.
 */
import { arrayElements, lastSpan, type ScannedObject, type Span } from '../http/json-scan.ts';
import type { Obj } from '../chat/index.ts';


export interface Source {
  /** A top-level string member (undefined: absent or not a string); `complete` false when cut at the bound. */
  string(key: string): { text: string; complete: boolean } | undefined;
  /** A top-level array member's elements, parsed, as far as the bound (then `cut` is set). */
  array(key: string): Iterable<unknown> | undefined;
  /** The bound stopped a walk: nothing after it may be emitted. */
  readonly cut: boolean;
}

export class ObjectSource implements Source {
  readonly cut = false;
  constructor(private readonly o: Obj) {}
  string(key: string) {
    const v = this.o[key];
    return typeof v === 'string' ? { text: v, complete: true } : undefined;
  }
  array(key: string) {
    const v = this.o[key];
    return Array.isArray(v) ? v : undefined;
  }
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

export class BodySource implements Source {
  cut = false;
  constructor(
    private readonly body: Buffer,
    private readonly scan: ScannedObject,
    private budget: number,
    /** The chain has as many links as it may: stop as if the walk's bound were reached. */
    private readonly full: () => boolean = () => false,
  ) {}

  string(key: string) {
    const span = lastSpan(this.scan, key);
    if (!span || this.body[span.start] !== QUOTE || this.cut) return undefined;
    const len = span.end - span.start;
    if (len <= this.budget) {
      this.budget -= len;
      return { text: JSON.parse(this.body.toString('utf8', span.start, span.end)) as string, complete: true };
    }
    const text = decodeStringPrefix(this.body, span, this.budget);
    this.budget = 0;
    this.cut = true;
    return { text, complete: false };
  }

  array(key: string): Iterable<unknown> | undefined {
    const span = lastSpan(this.scan, key);
    if (!span || this.body[span.start] !== 0x5b || this.cut) return undefined;
    return this.#elements(span);
  }

  *#elements(span: Span): Generator<unknown> {
    const limit = this.budget;
    let walked = 1;
    for (const el of arrayElements(this.body, span, limit)) {
      walked = el.end - span.start;
      let value: unknown;
      try {
        value = JSON.parse(this.body.toString('utf8', el.start, el.end));
      } catch {
        // Only an element cut at the bound fails to parse (the scanner checked the body).
        this.cut = true;
        this.budget = 0;
        return;
      }
      this.budget = Math.max(0, limit - walked);
      yield value;
      if (this.cut) return;
      if (this.full()) {
        this.cut = true;
        this.budget = 0;
        return;
      }
    }
    if (span.end - span.start - 1 > limit) {
      this.cut = true;
      this.budget = 0;
    } else this.budget = Math.max(0, limit - (span.end - span.start));
  }
}

/** The text of a JSON string's first `max` bytes (never splitting an escape or a UTF-8 sequence). */
function decodeStringPrefix(buf: Buffer, span: Span, max: number): string {
  let cut = span.start + Math.max(1, max);
  while (cut > span.start + 1 && (buf[cut] & 0xc0) === 0x80) cut--;
  const escapeAt = (p: number) => {
    let k = p - 1;
    while (k > span.start && buf[k] === BACKSLASH) k--;
    return (p - 1 - k) % 2 === 0; // an even run of backslashes before p: p opens an escape
  };
  for (let p = Math.max(span.start + 1, cut - 5); p < cut; p++) {
    if (buf[p] === BACKSLASH && escapeAt(p) && (buf[p + 1] === 0x75 ? p + 6 > cut : p + 2 > cut)) {
      cut = p;
      break;
    }
  }
  return JSON.parse(`${buf.toString('utf8', span.start, cut)}"`) as string;
}
