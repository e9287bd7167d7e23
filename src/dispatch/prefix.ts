/**
 * Prefix affinity (SPEC section 9, step 6): a request without a session
 * header gets an implicit session key from a hash of the start of its
 * prompt — for chat, the system message and the first user message; for
 * completions, the first bytes of the prompt — so the turns of one
 * conversation reach the host whose prompt cache holds them, from every
 * entry node, without coordination. Read from the raw bytes the scanner
 * already validated, with bounded work whatever the prompt's size.
 */
import crypto from 'node:crypto';
import { lastSpan, type ScannedObject, type Span } from '../http/json-scan.ts';

/** At most this many bytes of one message take part in the hash. */
export const PREFIX_MESSAGE_MAX = 64 * 1024;
/** At most this many bytes of a completion prompt. */
export const PREFIX_PROMPT_MAX = 2048;
/** At most this many messages are looked at to find the first user message. */
const MESSAGES_LOOKED_AT = 16;
/** At most this many bytes of the messages array are walked to find them (a longer system prompt is cut here). */
export const PREFIX_SCAN_MAX = 1024 * 1024;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/** The implicit session key of a request, or undefined when it has no prompt to key on. */
export function prefixKey(body: Buffer, scan: ScannedObject, path: string): string | undefined {
  const h = crypto.createHash('sha256');
  if (path === '/v1/completions') {
    const p = lastSpan(scan, 'prompt');
    if (!p) return undefined;
    h.update(body.subarray(p.start, Math.min(p.end, p.start + PREFIX_PROMPT_MAX)));
    return `p:${h.digest('base64url').slice(0, 22)}`;
  }
  const m = lastSpan(scan, 'messages') ?? lastSpan(scan, 'input');
  if (!m || body[m.start] !== 0x5b) return undefined;
  let system: Span | undefined;
  let user: Span | undefined;
  let seen = 0;
  for (const el of arrayElements(body, m, PREFIX_SCAN_MAX)) {
    const role = roleOf(body, el);
    if (role === 'system' || role === 'developer') system ??= el;
    else if (role === 'user') {
      user = el;
      break;
    }
    if (++seen >= MESSAGES_LOOKED_AT) break;
  }
  if (!user) return undefined;
  for (const el of system ? [system, user] : [user]) h.update(body.subarray(el.start, Math.min(el.end, el.start + PREFIX_MESSAGE_MAX))).update('\0');
  return `p:${h.digest('base64url').slice(0, 22)}`;
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

/** The `role` of a message object, read from its first bytes (roles are short, plain strings). */
function roleOf(buf: Buffer, el: Span): string | undefined {
  if (buf[el.start] !== 0x7b) return undefined;
  // The role member is usually first; look in a bounded window either way.
  const window = buf.subarray(el.start, Math.min(el.end, el.start + 4096)).toString('latin1');
  const m = /"role"\s*:\s*"([a-z_]{1,32})"/.exec(window);
  return m?.[1];
}
