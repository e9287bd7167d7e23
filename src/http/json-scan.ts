/**
 * Reading what routing needs from a JSON request body without building a
 * tree of it (SPEC sections 4 and 9). One pass over the raw bytes checks
 * that the body is well-formed JSON (so a malformed one is a 400, as before)
 * and records where each top-level member's value lies. The bytes are kept
 * as they came: the fields the node must set (`model` for an alias,
 * `stream_options` to learn usage) are spliced in at those offsets and every
 * other byte reaches the engine unchanged — a `seed` of 2^63−1 stays
 * 9223372036854775807, `1.0` stays `1.0`, escapes stay escapes.
 *
 * The scan is iterative (no recursion, so no nesting can overflow the
 * stack) and bounded: nesting deeper than `maxDepth` is refused.
 */

import { setImmediate as nextTurn } from 'node:timers/promises';

/** Where one top-level member's value lies in the body: bytes [start, end). */
export interface Span {
  start: number;
  end: number;
}

export interface ScannedObject {
  /** Every top-level member by its decoded key, in order; a key given twice has two spans (the last wins, as in JSON.parse). */
  readonly members: ReadonlyMap<string, readonly Span[]>;
  /** Offset of the top-level object's closing brace (where a member is added). */
  readonly close: number;
}

export type ScanResult = { ok: true; object: ScannedObject } | { ok: false; problem: 'syntax' | 'not-object' | 'depth'; detail: string };

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
const COLON = 0x3a;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;

const OBJ = 0;
const ARR = 1;

/** What the scanner expects next. */
const enum S {
  Value,
  ValueOrEnd,
  KeyOrEnd,
  Key,
  Colon,
  After,
  String,
  Trailing,
  Done,
}

class Syntax extends Error {}
class Depth extends Error {}

const isWs = (b: number) => b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09;
const isDigit = (b: number | undefined) => b !== undefined && b >= 0x30 && b <= 0x39;
const isHex = (b: number | undefined) => b !== undefined && ((b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66));
const LITERALS: Record<number, number[]> = { 0x74: [0x74, 0x72, 0x75, 0x65], 0x66: [0x66, 0x61, 0x6c, 0x73, 0x65], 0x6e: [0x6e, 0x75, 0x6c, 0x6c] };

/**
 * The scan as a resumable state machine: `run(budget)` walks at most about
 * `budget` bytes and returns, so a large body can be scanned in slices
 * between which the event loop serves everything else.
 */
export class JsonObjectScan {
  #i = 0;
  #state = S.Value;
  readonly #stack: number[] = [];
  #stringIsKey = false;
  #stringStart = 0;
  #key = '';
  /** Start of the top-level member value being read, or -1. */
  #memberStart = -1;
  #close = -1;
  #notObject = false;
  readonly #members = new Map<string, Span[]>();
  #result: ScanResult | undefined;

  constructor(
    private readonly buf: Uint8Array,
    private readonly maxDepth = 64,
  ) {}

  /** The result once the scan is over, else undefined (call run again). */
  run(budget = Infinity): ScanResult | undefined {
    if (this.#result) return this.#result;
    try {
      if (this.#step(budget)) this.#result = this.#finish();
    } catch (err) {
      if (err instanceof Syntax) this.#result = { ok: false, problem: 'syntax', detail: err.message };
      else if (err instanceof Depth) this.#result = { ok: false, problem: 'depth', detail: err.message };
      else throw err;
    }
    return this.#result;
  }

  #finish(): ScanResult {
    if (this.#notObject) return { ok: false, problem: 'not-object', detail: 'the body is not a JSON object' };
    return { ok: true, object: { members: this.#members, close: this.#close } };
  }

  /** True when the whole body has been read. */
  #step(budget: number): boolean {
    const buf = this.buf;
    const n = buf.length;
    const stop = Math.min(n, this.#i + budget);
    let i = this.#i;
    try {
      for (;;) {
        if (this.#state === S.Done) return true;
        // Out of budget with bytes left: come back later. At the end of the body every state decides.
        if (i >= stop && i < n) break;
        if (this.#state === S.String) {
          // The bulk of most bodies: walk it byte by byte, checking escapes and control characters.
          while (i < stop) {
            const b = buf[i];
            if (b === QUOTE) break;
            if (b === BACKSLASH) {
              const e = buf[i + 1];
              if (e === 0x75) {
                for (let k = 2; k < 6; k++) if (!isHex(buf[i + k])) throw new Syntax(`bad \\u escape at byte ${i}`);
                i += 6;
              } else if (e === QUOTE || e === BACKSLASH || e === 0x2f || e === 0x62 || e === 0x66 || e === 0x6e || e === 0x72 || e === 0x74) i += 2;
              else if (e === undefined) throw new Syntax('the body ends inside a string');
              else throw new Syntax(`bad escape at byte ${i}`);
              continue;
            }
            if (b < 0x20) throw new Syntax(`control character in a string at byte ${i}`);
            i++;
          }
          if (i >= n) throw new Syntax('the body ends inside a string');
          if (i >= stop) break;
          i++; // the closing quote
          if (this.#stringIsKey) {
            if (this.#stack.length === 1) this.#key = decodeKey(buf, this.#stringStart, i);
            this.#state = S.Colon;
          } else this.#valueDone(i);
          continue;
        }
        while (i < n && isWs(buf[i])) i++;
        if (this.#state === S.Trailing) {
          if (i < n) throw new Syntax(`unexpected data after the object at byte ${i}`);
          this.#state = S.Done;
          continue;
        }
        if (i >= n) throw new Syntax(this.#stack.length ? 'the body ends inside a value' : 'the body is empty');
        const b = buf[i];
        switch (this.#state) {
          case S.ValueOrEnd:
            if (b === CLOSE_BRACKET) {
              this.#stack.pop();
              this.#valueDone(++i);
              continue;
            }
            this.#state = S.Value;
          // falls through
          case S.Value: {
            if (this.#stack.length === 0 && b !== OPEN_BRACE) this.#notObject = true;
            if (this.#stack.length === 1 && this.#memberStart < 0) this.#memberStart = i;
            if (b === OPEN_BRACE || b === OPEN_BRACKET) {
              if (this.#stack.length + 1 > this.maxDepth) throw new Depth(`the body nests deeper than ${this.maxDepth} levels`);
              this.#stack.push(b === OPEN_BRACE ? OBJ : ARR);
              this.#state = b === OPEN_BRACE ? S.KeyOrEnd : S.ValueOrEnd;
              i++;
            } else if (b === QUOTE) {
              this.#stringIsKey = false;
              this.#state = S.String;
              i++;
            } else if (b === 0x2d || isDigit(b)) this.#valueDone((i = skipNumber(buf, i)));
            else if (LITERALS[b]) this.#valueDone((i = skipLiteral(buf, i, LITERALS[b])));
            else throw new Syntax(`unexpected character at byte ${i}`);
            continue;
          }
          case S.KeyOrEnd:
            if (b === CLOSE_BRACE) {
              this.#closeObject(i);
              this.#valueDone(++i);
              continue;
            }
          // falls through
          case S.Key:
            if (b !== QUOTE) throw new Syntax(`expected a member name at byte ${i}`);
            this.#stringIsKey = true;
            this.#stringStart = i;
            this.#state = S.String;
            i++;
            continue;
          case S.Colon:
            if (b !== COLON) throw new Syntax(`expected ":" at byte ${i}`);
            this.#state = S.Value;
            i++;
            continue;
          case S.After: {
            const top = this.#stack[this.#stack.length - 1];
            if (b === COMMA) {
              this.#state = top === OBJ ? S.Key : S.Value;
              i++;
            } else if (top === OBJ && b === CLOSE_BRACE) {
              this.#closeObject(i);
              this.#valueDone(++i);
            } else if (top === ARR && b === CLOSE_BRACKET) {
              this.#stack.pop();
              this.#valueDone(++i);
            } else throw new Syntax(`expected "," or a closing bracket at byte ${i}`);
            continue;
          }
        }
      }
    } finally {
      this.#i = i;
    }
    return false;
  }

  #closeObject(at: number): void {
    this.#stack.pop();
    if (this.#stack.length === 0) this.#close = at;
  }

  /** A value ended just before `end`. */
  #valueDone(end: number): void {
    if (this.#stack.length === 0) {
      this.#state = S.Trailing;
      return;
    }
    this.#state = S.After;
    if (this.#stack.length === 1 && this.#memberStart >= 0 && !this.#notObject) {
      const spans = this.#members.get(this.#key);
      const span = { start: this.#memberStart, end };
      if (spans) spans.push(span);
      else this.#members.set(this.#key, [span]);
      this.#memberStart = -1;
    }
  }
}

/** Scan a whole body that must be one JSON object, in one go. */
export function scanJsonObject(buf: Uint8Array, maxDepth = 64): ScanResult {
  return new JsonObjectScan(buf, maxDepth).run()!;
}

/** Bytes scanned between two looks at the clock. */
export const SCAN_SLICE = 64 * 1024;
/** The event loop gets a turn at least this often while a large body is scanned (the cost per byte depends on its shape). */
export const SCAN_TURN_MS = 4;

/** Scan, giving the event loop a turn every SCAN_TURN_MS, so no body shape holds it for long. */
export async function scanJsonObjectSliced(buf: Uint8Array, maxDepth = 64, slice = SCAN_SLICE): Promise<ScanResult> {
  const scan = new JsonObjectScan(buf, maxDepth);
  for (;;) {
    const turn = performance.now() + SCAN_TURN_MS;
    do {
      const r = scan.run(slice);
      if (r) return r;
    } while (performance.now() < turn);
    await nextTurn();
  }
}

function decodeKey(buf: Uint8Array, start: number, end: number): string {
  const raw = Buffer.from(buf.buffer, buf.byteOffset + start, end - start);
  // Most keys have no escape: decode them directly; the rest through JSON (bounded: one key).
  return raw.includes(BACKSLASH) ? (JSON.parse(raw.toString('utf8')) as string) : raw.toString('utf8', 1, raw.length - 1);
}

function skipNumber(buf: Uint8Array, i: number): number {
  const n = buf.length;
  const from = i;
  if (buf[i] === 0x2d) i++;
  if (buf[i] === 0x30) i++;
  else if (buf[i] >= 0x31 && buf[i] <= 0x39) while (i < n && isDigit(buf[i])) i++;
  else throw new Syntax(`bad number at byte ${from}`);
  if (buf[i] === 0x2e) {
    i++;
    if (!isDigit(buf[i])) throw new Syntax(`bad number at byte ${from}`);
    while (i < n && isDigit(buf[i])) i++;
  }
  if (buf[i] === 0x65 || buf[i] === 0x45) {
    i++;
    if (buf[i] === 0x2b || buf[i] === 0x2d) i++;
    if (!isDigit(buf[i])) throw new Syntax(`bad number at byte ${from}`);
    while (i < n && isDigit(buf[i])) i++;
  }
  return i;
}

function skipLiteral(buf: Uint8Array, i: number, word: number[]): number {
  for (let k = 0; k < word.length; k++) if (buf[i + k] !== word[k]) throw new Syntax(`unexpected token at byte ${i}`);
  return i + word.length;
}

/** The last span of a top-level member (the one JSON.parse would keep). */
export function lastSpan(o: ScannedObject, key: string): Span | undefined {
  const s = o.members.get(key);
  return s ? s[s.length - 1] : undefined;
}

/** Decode one member's value (bounded by the caller: only small fields are decoded). */
export function valueOf(buf: Uint8Array, span: Span): unknown {
  return JSON.parse(Buffer.from(buf.buffer, buf.byteOffset + span.start, span.end - span.start).toString('utf8'));
}

/** New text for a byte range. */
export interface Edit {
  span: Span;
  text: string;
}

/** Replace byte ranges (non-overlapping) with new text; every other byte stays as it was. */
export function splice(buf: Buffer, edits: readonly Edit[]): Buffer {
  if (edits.length === 0) return buf;
  return Buffer.concat(spliceParts(buf, edits));
}

/** Bytes copied between two turns of the event loop when a large body is spliced. */
const COPY_SLICE = 1 << 20;

/**
 * splice() for a body of any size: a large one is assembled a slice per
 * turn of the event loop, as one copy of a 30 MiB body (and the faulting-in
 * of its fresh pages) would hold the loop for 100 ms and more.
 */
export async function spliceAsync(buf: Buffer, edits: readonly Edit[]): Promise<Buffer> {
  if (edits.length === 0 || buf.length <= COPY_SLICE) return splice(buf, edits);
  const parts = spliceParts(buf, edits);
  const out = Buffer.allocUnsafe(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const part of parts) {
    for (let i = 0; i < part.length; i += COPY_SLICE) {
      at += part.copy(out, at, i, Math.min(part.length, i + COPY_SLICE));
      await nextTurn();
    }
  }
  return out;
}

function spliceParts(buf: Buffer, edits: readonly Edit[]): Buffer[] {
  const sorted = [...edits].sort((a, b) => a.span.start - b.span.start);
  const parts: Buffer[] = [];
  let at = 0;
  for (const e of sorted) {
    parts.push(buf.subarray(at, e.span.start), Buffer.from(e.text, 'utf8'));
    at = e.span.end;
  }
  parts.push(buf.subarray(at));
  return parts;
}

/**
 * Set one top-level member to `json` (already serialised): every occurrence
 * is replaced when it exists, else the member is added before the closing
 * brace.
 */
export function setMemberEdits(o: ScannedObject, key: string, json: string): Edit[] {
  const spans = o.members.get(key);
  if (spans) return spans.map((span) => ({ span, text: json }));
  const empty = o.members.size === 0;
  return [{ span: { start: o.close, end: o.close }, text: `${empty ? '' : ','}${JSON.stringify(key)}:${json}` }];
}

/**
 * The elements of a JSON array whose bytes the scanner has already checked,
 * one at a time: only as far as the caller reads, and no further than
 * `limit` bytes into the array (an element cut there ends at the limit).
 * Strings are skipped with indexOf, so a long message costs little.
 */
export function* arrayElements(buf: Buffer, span: Span, limit = Infinity): Generator<Span> {
  let i = span.start + 1;
  const end = Math.min(span.end - 1, span.start + 1 + limit); // the closing bracket, or the limit
  let depth = 0;
  let start = -1;
  while (i < end) {
    const b = buf[i];
    if (b === QUOTE) {
      if (start < 0) start = i;
      i = stringEnd(buf, i, end);
      continue;
    }
    if (b === 0x7b || b === 0x5b) {
      if (start < 0) start = i;
      depth++;
    } else if (b === 0x7d || b === 0x5d) depth--;
    else if (b === 0x2c && depth === 0) {
      if (start >= 0) yield { start, end: trimEnd(buf, start, i) };
      start = -1;
    } else if (start < 0 && b !== 0x20 && b !== 0x0a && b !== 0x0d && b !== 0x09) start = i;
    i++;
  }
  if (start >= 0) yield { start, end: trimEnd(buf, start, end) };
}

/** Just past the string that opens at `i`, or `end` when it runs on past it. */
function stringEnd(buf: Buffer, i: number, end: number): number {
  for (let q = buf.indexOf(QUOTE, i + 1); q >= 0 && q < end; q = buf.indexOf(QUOTE, q + 1)) {
    let k = q - 1;
    while (buf[k] === BACKSLASH) k--;
    if ((q - 1 - k) % 2 === 0) return q + 1;
  }
  return end;
}

function trimEnd(buf: Buffer, start: number, end: number): number {
  while (end > start && (buf[end - 1] === 0x20 || buf[end - 1] === 0x0a || buf[end - 1] === 0x0d || buf[end - 1] === 0x09)) end--;
  return end;
}

