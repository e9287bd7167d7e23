/**
 * W3C Trace Context `traceparent` (https://www.w3.org/TR/trace-context/):
 * `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`. What a client
 * sends is read strictly; anything else (a wrong length, upper case, the
 * all-zero ids, version ff, a value too long) is ignored as if absent.
 */
export interface TraceParent {
  traceId: string;
  spanId: string;
  /** The sampled flag: the caller records this trace. */
  sampled: boolean;
}

const FORM = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;
const ZERO_TRACE = '0'.repeat(32);
const ZERO_SPAN = '0'.repeat(16);

/** The parent a header names, or undefined for a missing or malformed one (never an error). */
export function parseTraceparent(text: string | undefined): TraceParent | undefined {
  if (text === undefined || text.length > 512) return undefined;
  const m = FORM.exec(text.trim());
  if (!m) return undefined;
  const [, version, traceId, spanId, flags, rest] = m;
  // Version 00 has nothing after the flags; a later version may, and is read as 00 (the spec's rule).
  if (version === 'ff' || (version === '00' && rest !== undefined)) return undefined;
  if (traceId === ZERO_TRACE || spanId === ZERO_SPAN) return undefined;
  return { traceId, spanId, sampled: (parseInt(flags, 16) & 1) === 1 };
}

export function formatTraceparent(p: TraceParent): string {
  return `00-${p.traceId}-${p.spanId}-${p.sampled ? '01' : '00'}`;
}
