/**
 * LZW exactly as Go's compress/lzw with LSB bit order and literal width 8,
 * which is what memberlist's compress message carries (Algo 0 = lzw).
 *
 * Codes start 9 bits wide; 256 is "clear", 257 is "end". The writer begins
 * with a clear code, widens when the next code would not fit, and when the
 * table reaches 4095 it emits clear and starts over (without adding the
 * entry that triggered it). A generic LZW library differs in these details,
 * so both directions are written here and pinned by golden fixtures.
 */

const LIT_WIDTH = 8;
const CLEAR = 1 << LIT_WIDTH; // 256
const EOF_CODE = CLEAR + 1; // 257
const MAX_CODE = (1 << 12) - 1; // 4095
const MAX_WIDTH = 12;

class BitWriterLSB {
  private out: Uint8Array;
  private n = 0;
  private bits = 0;
  private nBits = 0;

  constructor(sizeHint: number) {
    this.out = new Uint8Array(Math.max(64, sizeHint));
  }

  write(code: number, width: number): void {
    this.bits |= code << this.nBits;
    this.nBits += width;
    while (this.nBits >= 8) {
      if (this.n === this.out.length) this.grow();
      this.out[this.n++] = this.bits & 0xff;
      this.bits >>>= 8;
      this.nBits -= 8;
    }
  }

  private grow(): void {
    const bigger = new Uint8Array(this.out.length * 2);
    bigger.set(this.out);
    this.out = bigger;
  }

  finish(): Buffer {
    if (this.nBits > 0) {
      if (this.n === this.out.length) this.grow();
      this.out[this.n++] = this.bits & 0xff;
    }
    return Buffer.from(this.out.buffer, this.out.byteOffset, this.n);
  }
}

/** Compresses like `lzw.NewWriter(w, lzw.LSB, 8)` followed by Write and Close. */
export function lzwCompress(input: Buffer): Buffer {
  const bw = new BitWriterLSB(input.length >>> 1);
  let width = LIT_WIDTH + 1;
  let hi = CLEAR + 1;
  let overflow = 1 << (LIT_WIDTH + 1);
  let table = new Map<number, number>();

  // Returns false when the table was full and has just been cleared.
  const incHi = (): boolean => {
    hi++;
    if (hi === overflow) {
      width++;
      overflow <<= 1;
    }
    if (hi === MAX_CODE) {
      bw.write(CLEAR, width);
      width = LIT_WIDTH + 1;
      hi = CLEAR + 1;
      overflow = CLEAR << 1;
      table = new Map();
      return false;
    }
    return true;
  };

  if (input.length === 0) {
    bw.write(CLEAR, width);
    bw.write(EOF_CODE, width);
    return bw.finish();
  }

  bw.write(CLEAR, width);
  let code = input[0];
  for (let i = 1; i < input.length; i++) {
    const literal = input[i];
    const key = code * 256 + literal;
    const found = table.get(key);
    if (found !== undefined) {
      code = found;
      continue;
    }
    bw.write(code, width);
    code = literal;
    if (!incHi()) continue;
    table.set(key, hi);
  }
  bw.write(code, width);
  incHi();
  bw.write(EOF_CODE, width);
  return bw.finish();
}

/** Thrown when a compressed payload would expand beyond the allowed size. */
export class DecompressLimitError extends Error {
  readonly code = 'ERR_LZW_LIMIT';
  constructor(readonly limit: number) {
    super(`lzw: decompressed size exceeds the limit of ${limit} bytes`);
    this.name = 'DecompressLimitError';
  }
}

/**
 * Decompresses like `lzw.NewReader(r, lzw.LSB, 8)` read to the end, but
 * refuses (DecompressLimitError) any input that would expand to more than
 * `maxOutput` bytes.
 *
 * Two passes over the codes, both in typed arrays:
 * 1. lengths only: every table entry is "the string of some earlier code
 *    plus one byte", so its length is known without producing bytes. This
 *    pass costs O(codes), i.e. O(input), and stops as soon as the total
 *    passes the limit: a compression bomb (a few KB that would expand to
 *    gigabytes) is refused before a single output byte is allocated.
 * 2. bytes: the output is allocated once at its exact size; every table
 *    entry is a (start, length) window on output already written (the
 *    string of `last` followed by the next byte), so each code is one
 *    memmove. Work is O(input + output).
 */
export function lzwDecompress(input: Uint8Array, maxOutput: number): Buffer {
  const total = lzwRun(input, maxOutput, null);
  const out = Buffer.allocUnsafe(total);
  lzwRun(input, maxOutput, new Uint8Array(out.buffer, out.byteOffset, total));
  return out;
}

// Per-code (start, length) windows on the output, reused between calls (single-threaded).
const entryStart = new Int32Array(1 << MAX_WIDTH);
const entryLen = new Int32Array(1 << MAX_WIDTH);

/** One decoding pass; writes into `out` when given, returns the output length. */
function lzwRun(input: Uint8Array, maxOutput: number, out: Uint8Array | null): number {
  let bits = 0;
  let nBits = 0;
  let pos = 0;
  let width = LIT_WIDTH + 1;
  let hi = EOF_CODE;
  let overflow = 1 << width;
  let last = -1;
  let lastStart = 0;
  let lastLen = 0;
  let o = 0;
  const inLen = input.length;

  for (;;) {
    while (nBits < width) {
      if (pos >= inLen) throw new Error('lzw: unexpected EOF');
      bits |= input[pos++] << nBits;
      nBits += 8;
    }
    const code = bits & ((1 << width) - 1);
    bits >>>= width;
    nBits -= width;

    let len: number;
    if (code < CLEAR) {
      len = 1;
      if (o + 1 > maxOutput) throw new DecompressLimitError(maxOutput);
      if (out) out[o] = code;
    } else if (code === CLEAR) {
      width = LIT_WIDTH + 1;
      hi = EOF_CODE;
      overflow = 1 << width;
      last = -1;
      continue;
    } else if (code === EOF_CODE) {
      return o;
    } else if (code <= hi) {
      if (code === hi && last !== -1) {
        // KwKwK: last's string followed by its own first byte.
        len = lastLen + 1;
        if (o + len > maxOutput) throw new DecompressLimitError(maxOutput);
        if (out) {
          if (lastLen > 32) out.copyWithin(o, lastStart, lastStart + lastLen);
          else for (let i = 0; i < lastLen; i++) out[o + i] = out[lastStart + i];
          out[o + lastLen] = out[lastStart];
        }
      } else {
        // code === hi with no last happens only once the table is frozen at
        // 12 bits; hi's entry was defined before it froze.
        len = entryLen[code];
        if (len === 0) throw new Error('lzw: invalid code');
        if (o + len > maxOutput) throw new DecompressLimitError(maxOutput);
        if (out) {
          const from = entryStart[code];
          if (len > 32) out.copyWithin(o, from, from + len);
          else for (let i = 0; i < len; i++) out[o + i] = out[from + i];
        }
      }
    } else {
      throw new Error('lzw: invalid code');
    }
    if (last !== -1) {
      // The new entry is last's string plus the first byte just written:
      // exactly the output window starting where last's string started.
      entryStart[hi] = lastStart;
      entryLen[hi] = lastLen + 1;
    }
    last = code;
    lastStart = o;
    lastLen = len;
    o += len;
    hi++;
    if (hi >= overflow) {
      if (width === MAX_WIDTH) {
        last = -1;
        hi--;
      } else {
        width++;
        overflow = 1 << width;
      }
    }
  }
}
