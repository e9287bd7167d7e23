/** One byte range of a `Range: bytes=...` header (RFC 9110 section 14), judged against a file size. Pure. */
export type RangeAnswer =
  /** No Range, or one we may ignore (several ranges, another unit): the whole file, 200. */
  | { kind: 'whole' }
  /** 206 with bytes start..end inclusive. */
  | { kind: 'part'; start: number; end: number }
  /** 416. */
  | { kind: 'unsatisfiable' };

const ONE = /^bytes=(\d*)-(\d*)$/;

export function parseRange(header: string | undefined, size: number): RangeAnswer {
  if (header === undefined) return { kind: 'whole' };
  const m = ONE.exec(header.trim());
  // A multi-range or non-byte request may be answered with the whole file (RFC 9110 14.2).
  if (!m) return { kind: 'whole' };
  const [, a, b] = m;
  if (a === '' && b === '') return { kind: 'whole' };
  if (a === '') {
    // Suffix: the last n bytes.
    const n = Number(b);
    if (n === 0 || size === 0) return { kind: 'unsatisfiable' };
    return { kind: 'part', start: Math.max(0, size - n), end: size - 1 };
  }
  const start = Number(a);
  if (!Number.isSafeInteger(start) || start >= size) return { kind: 'unsatisfiable' };
  const end = b === '' ? size - 1 : Math.min(Number(b), size - 1);
  if (!Number.isSafeInteger(end) || end < start) return { kind: 'whole' };
  return { kind: 'part', start, end };
}
