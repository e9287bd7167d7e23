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
  private out: number[] = [];
  private bits = 0;
  private nBits = 0;

  write(code: number, width: number): void {
    this.bits |= code << this.nBits;
    this.nBits += width;
    while (this.nBits >= 8) {
      this.out.push(this.bits & 0xff);
      this.bits >>>= 8;
      this.nBits -= 8;
    }
  }

  finish(): Buffer {
    if (this.nBits > 0) this.out.push(this.bits & 0xff);
    return Buffer.from(this.out);
  }
}

/** Compresses like `lzw.NewWriter(w, lzw.LSB, 8)` followed by Write and Close. */
export function lzwCompress(input: Buffer): Buffer {
  const bw = new BitWriterLSB();
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

/** Decompresses like `lzw.NewReader(r, lzw.LSB, 8)` read to the end. */
export function lzwDecompress(input: Buffer, maxOutput = 64 * 1024 * 1024): Buffer {
  const out: number[] = [];
  let bits = 0;
  let nBits = 0;
  let pos = 0;
  let width = LIT_WIDTH + 1;
  let hi = EOF_CODE;
  let overflow = 1 << width;
  let last = -1;
  const prefix = new Uint16Array(1 << MAX_WIDTH);
  const suffix = new Uint8Array(1 << MAX_WIDTH);
  const stack: number[] = [];

  const readCode = (): number => {
    while (nBits < width) {
      if (pos >= input.length) throw new Error('lzw: unexpected EOF');
      bits |= input[pos++] << nBits;
      nBits += 8;
    }
    const code = bits & ((1 << width) - 1);
    bits >>>= width;
    nBits -= width;
    return code;
  };

  for (;;) {
    const code = readCode();
    if (code < CLEAR) {
      out.push(code);
      if (last !== -1) {
        suffix[hi] = code;
        prefix[hi] = last;
      }
    } else if (code === CLEAR) {
      width = LIT_WIDTH + 1;
      hi = EOF_CODE;
      overflow = 1 << width;
      last = -1;
      continue;
    } else if (code === EOF_CODE) {
      break;
    } else if (code <= hi) {
      stack.length = 0;
      let c = code;
      if (code === hi && last !== -1) {
        // KwKwK case: the string is last's string plus its first byte.
        let f = last;
        while (f >= CLEAR) f = prefix[f];
        stack.push(f);
        c = last;
      }
      while (c >= CLEAR) {
        stack.push(suffix[c]);
        c = prefix[c];
      }
      stack.push(c);
      for (let i = stack.length - 1; i >= 0; i--) out.push(stack[i]);
      if (last !== -1) {
        suffix[hi] = c;
        prefix[hi] = last;
      }
    } else {
      throw new Error('lzw: invalid code');
    }
    if (out.length > maxOutput) throw new Error('lzw: output too large');
    last = code;
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
  return Buffer.from(out);
}
