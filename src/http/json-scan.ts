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

/** Where one top-level member's value lies in the body: bytes [start, end). */
export interface Span {
  start: number;
  end: number;
}

export interface ScannedObject {
  /** Every top-level member by its decoded key, in order; a key given twice has two spans (the last wins, as in JSON.parse). */
  readonly members: ReadonlyMap<string, readonly Span[]>;
  /** Offset of the top-level object's opening brace and closing brace. */
  readonly open: number;
  readonly close: number;
}

export type ScanResult = { ok: true; object: ScannedObject } | { ok: false; problem: 'syntax' | 'not-object' | 'depth'; detail: string };

const enum C {
  Quote = 0x22,
  Backslash = 0x5c,
  Comma = 0x2c,
  Colon = 0x3a,
  OpenBrace = 0x7b,
  CloseBrace = 0x7d,
  OpenBracket = 0x5b,
  CloseBracket = 0x5d,
  Minus = 0x2d,
  Plus = 0x2b,
  Dot = 0x2e,
  Zero = 0x30,
  Nine = 0x39,
}

function isWs(b: number): boolean {
  return b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09;
}

class Syntax extends Error {}

/** Scan a whole body that must be one JSON object. */
export function scanJsonObject(buf: Uint8Array, maxDepth = 64): ScanResult {
  try {
    return scan(buf, maxDepth);
  } catch (err) {
    if (err instanceof Syntax) return { ok: false, problem: 'syntax', detail: err.message };
    throw err;
  }
}

function scan(buf: Uint8Array, maxDepth: number): ScanResult {
  const n = buf.length;
  let i = skipWs(buf, 0);
  if (i >= n) throw new Syntax('the body is empty');
  if (buf[i] !== C.OpenBrace) {
    // Well-formed JSON that is not an object is a different error from a broken body.
    const end = skipValue(buf, i, maxDepth, 0);
    if (skipWs(buf, end) !== n) throw new Syntax(`unexpected data at byte ${skipWs(buf, end)}`);
    return { ok: false, problem: 'not-object', detail: 'the body is not a JSON object' };
  }
  const open = i;
  const members = new Map<string, Span[]>();
  i = skipWs(buf, i + 1);
  if (buf[i] === C.CloseBrace) {
    const close = i;
    if (skipWs(buf, i + 1) !== n) throw new Syntax(`unexpected data after the object at byte ${skipWs(buf, i + 1)}`);
    return { ok: true, object: { members, open, close } };
  }
  for (;;) {
    if (buf[i] !== C.Quote) throw new Syntax(`expected a member name at byte ${i}`);
    const keyEnd = skipString(buf, i);
    const key = decodeKey(buf, i, keyEnd);
    i = skipWs(buf, keyEnd);
    if (buf[i] !== C.Colon) throw new Syntax(`expected ":" at byte ${i}`);
    const start = skipWs(buf, i + 1);
    let end: number;
    try {
      end = skipValue(buf, start, maxDepth, 1);
    } catch (err) {
      if (err instanceof DepthError) return { ok: false, problem: 'depth', detail: err.message };
      throw err;
    }
    const spans = members.get(key);
    if (spans) spans.push({ start, end });
    else members.set(key, [{ start, end }]);
    i = skipWs(buf, end);
    if (buf[i] === C.Comma) {
      i = skipWs(buf, i + 1);
      continue;
    }
    if (buf[i] === C.CloseBrace) {
      const close = i;
      const after = skipWs(buf, i + 1);
      if (after !== n) throw new Syntax(`unexpected data after the object at byte ${after}`);
      return { ok: true, object: { members, open, close } };
    }
    throw new Syntax(i >= n ? 'the body ends inside the object' : `expected "," or "}" at byte ${i}`);
  }
}

class DepthError extends Error {}

function skipWs(buf: Uint8Array, i: number): number {
  while (i < buf.length && isWs(buf[i])) i++;
  return i;
}

/** Past the closing quote of the string that starts at `i`. */
function skipString(buf: Uint8Array, i: number): number {
  const n = buf.length;
  i++;
  while (i < n) {
    const b = buf[i];
    if (b === C.Quote) return i + 1;
    if (b === C.Backslash) {
      const e = buf[i + 1];
      if (e === 0x75 /* u */) {
        for (let k = 2; k < 6; k++) if (!isHex(buf[i + k])) throw new Syntax(`bad \\u escape at byte ${i}`);
        i += 6;
        continue;
      }
      if (e === C.Quote || e === C.Backslash || e === 0x2f || e === 0x62 || e === 0x66 || e === 0x6e || e === 0x72 || e === 0x74) {
        i += 2;
        continue;
      }
      throw new Syntax(`bad escape at byte ${i}`);
    }
    if (b < 0x20) throw new Syntax(`control character in a string at byte ${i}`);
    i++;
  }
  throw new Syntax('the body ends inside a string');
}

function isHex(b: number | undefined): boolean {
  return b !== undefined && ((b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66));
}

function decodeKey(buf: Uint8Array, start: number, end: number): string {
  const raw = Buffer.from(buf.buffer, buf.byteOffset + start, end - start);
  // Most keys have no escape: decode them directly; the rest through JSON (bounded: one key).
  return raw.includes(C.Backslash) ? (JSON.parse(raw.toString('utf8')) as string) : raw.toString('utf8', 1, raw.length - 1);
}

function skipNumber(buf: Uint8Array, i: number): number {
  const n = buf.length;
  const from = i;
  if (buf[i] === C.Minus) i++;
  if (buf[i] === C.Zero) i++;
  else if (buf[i] >= 0x31 && buf[i] <= C.Nine) while (i < n && buf[i] >= C.Zero && buf[i] <= C.Nine) i++;
  else throw new Syntax(`bad number at byte ${from}`);
  if (buf[i] === C.Dot) {
    i++;
    if (!(buf[i] >= C.Zero && buf[i] <= C.Nine)) throw new Syntax(`bad number at byte ${from}`);
    while (i < n && buf[i] >= C.Zero && buf[i] <= C.Nine) i++;
  }
  if (buf[i] === 0x65 || buf[i] === 0x45) {
    i++;
    if (buf[i] === C.Plus || buf[i] === C.Minus) i++;
    if (!(buf[i] >= C.Zero && buf[i] <= C.Nine)) throw new Syntax(`bad number at byte ${from}`);
    while (i < n && buf[i] >= C.Zero && buf[i] <= C.Nine) i++;
  }
  return i;
}

const TRUE = [0x74, 0x72, 0x75, 0x65];
const FALSE = [0x66, 0x61, 0x6c, 0x73, 0x65];
const NULL = [0x6e, 0x75, 0x6c, 0x6c];

function skipLiteral(buf: Uint8Array, i: number, word: number[]): number {
  for (let k = 0; k < word.length; k++) if (buf[i + k] !== word[k]) throw new Syntax(`unexpected token at byte ${i}`);
  return i + word.length;
}

/**
 * Past the end of the value that starts at `i`, which sits at nesting
 * `depth`. Containers are walked with an explicit stack of open brackets.
 */
function skipValue(buf: Uint8Array, i: number, maxDepth: number, depth: number): number {
  const n = buf.length;
  const stack: number[] = [];
  // expectValue: the next token must be a value; otherwise a separator or a closer.
  let expectValue = true;
  for (;;) {
    i = skipWs(buf, i);
    if (i >= n) throw new Syntax('the body ends inside a value');
    const b = buf[i];
    if (expectValue) {
      if (b === C.OpenBrace || b === C.OpenBracket) {
        if (depth + stack.length + 1 > maxDepth) throw new DepthError(`the body nests deeper than ${maxDepth} levels`);
        stack.push(b);
        i = skipWs(buf, i + 1);
        const closer = b === C.OpenBrace ? C.CloseBrace : C.CloseBracket;
        if (buf[i] === closer) {
          stack.pop();
          i++;
          if (stack.length === 0) return i;
          expectValue = false;
          continue;
        }
        if (b === C.OpenBrace) i = objectKey(buf, i);
        continue;
      }
      if (b === C.Quote) i = skipString(buf, i);
      else if (b === C.Minus || (b >= C.Zero && b <= C.Nine)) i = skipNumber(buf, i);
      else if (b === 0x74) i = skipLiteral(buf, i, TRUE);
      else if (b === 0x66) i = skipLiteral(buf, i, FALSE);
      else if (b === 0x6e) i = skipLiteral(buf, i, NULL);
      else throw new Syntax(`unexpected character at byte ${i}`);
      if (stack.length === 0) return i;
      expectValue = false;
      continue;
    }
    const top = stack[stack.length - 1];
    if (b === C.Comma) {
      i = skipWs(buf, i + 1);
      if (top === C.OpenBrace) i = objectKey(buf, i);
      expectValue = true;
      continue;
    }
    if ((top === C.OpenBrace && b === C.CloseBrace) || (top === C.OpenBracket && b === C.CloseBracket)) {
      stack.pop();
      i++;
      if (stack.length === 0) return i;
      continue;
    }
    throw new Syntax(`expected "," or a closing bracket at byte ${i}`);
  }
}

/** A member name and its colon inside a nested object; returns where the value starts. */
function objectKey(buf: Uint8Array, i: number): number {
  if (buf[i] !== C.Quote) throw new Syntax(`expected a member name at byte ${i}`);
  i = skipWs(buf, skipString(buf, i));
  if (buf[i] !== C.Colon) throw new Syntax(`expected ":" at byte ${i}`);
  return i + 1;
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

/** Replace byte ranges (non-overlapping) with new text; every other byte stays as it was. */
export function splice(buf: Buffer, edits: readonly { span: Span; text: string }[]): Buffer {
  if (edits.length === 0) return buf;
  const sorted = [...edits].sort((a, b) => a.span.start - b.span.start);
  const parts: Buffer[] = [];
  let at = 0;
  for (const e of sorted) {
    parts.push(buf.subarray(at, e.span.start), Buffer.from(e.text, 'utf8'));
    at = e.span.end;
  }
  parts.push(buf.subarray(at));
  return Buffer.concat(parts);
}

/**
 * Set one top-level member to `json` (already serialised): every occurrence
 * is replaced when it exists, else the member is added before the closing
 * brace.
 */
export function setMemberEdits(buf: Buffer, o: ScannedObject, key: string, json: string): { span: Span; text: string }[] {
  const spans = o.members.get(key);
  if (spans) return spans.map((span) => ({ span, text: json }));
  const empty = o.members.size === 0;
  return [{ span: { start: o.close, end: o.close }, text: `${empty ? '' : ','}${JSON.stringify(key)}:${json}` }];
}
