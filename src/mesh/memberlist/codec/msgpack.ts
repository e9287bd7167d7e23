/**
 * The msgpack subset that Go memberlist speaks, byte for byte.
 *
 * memberlist encodes with `codec.MsgpackHandle{}` of hashicorp/go-msgpack
 * (an old ugorji codec) left at its defaults, which means:
 * - structs are maps whose keys are the Go field names, SORTED by name
 *   (the handle encodes `toMap` from the name-sorted field list);
 *   `omitempty` fields with zero values are left out;
 * - strings AND []byte are both written as the old "raw" family: fixraw
 *   (0xa0|len, len < 32), raw16 (0xda), raw32 (0xdb). No str8 (0xd9) and no
 *   bin types, because `WriteExt` is false. A nil []byte is msgpack nil (0xc0);
 *   an empty non-nil []byte is 0xa0;
 * - unsigned and non-negative signed integers use the smallest form:
 *   positive fixint (<= 127), then uint8 0xcc, uint16 0xcd, uint32 0xce,
 *   uint64 0xcf; negative numbers use negative fixint or int8..int64.
 *
 * The decoder is generous: it accepts every msgpack type (str8, bin, ext are
 * read as bytes) so that newer peers still decode.
 */

/** Thrown when the buffer ends in the middle of a value (streams read more). */
export class IncompleteError extends Error {
  constructor() {
    super('msgpack: unexpected end of buffer');
    this.name = 'IncompleteError';
  }
}

/** A field of a struct to encode. */
export type Field =
  | { name: string; kind: 'uint' | 'int'; value: number; omitEmpty?: boolean }
  | { name: string; kind: 'str'; value: string; omitEmpty?: boolean }
  | { name: string; kind: 'bytes'; value: Buffer | null | undefined; omitEmpty?: boolean }
  | { name: string; kind: 'bool'; value: boolean; omitEmpty?: boolean };

export class Writer {
  private chunks: number[] = [];
  private bufs: Buffer[] = [];

  private flushBytes(): void {
    if (this.chunks.length) {
      this.bufs.push(Buffer.from(this.chunks));
      this.chunks = [];
    }
  }

  byte(b: number): this {
    this.chunks.push(b & 0xff);
    return this;
  }

  raw(b: Buffer): this {
    this.flushBytes();
    this.bufs.push(b);
    return this;
  }

  private be(n: number, size: 2 | 4 | 8): void {
    if (size === 8) {
      const big = BigInt(n);
      for (let i = 7; i >= 0; i--) this.chunks.push(Number((big >> BigInt(i * 8)) & 0xffn));
      return;
    }
    for (let i = size - 1; i >= 0; i--) this.chunks.push(Math.floor(n / 2 ** (i * 8)) & 0xff);
  }

  nil(): this {
    return this.byte(0xc0);
  }

  bool(b: boolean): this {
    return this.byte(b ? 0xc3 : 0xc2);
  }

  uint(n: number): this {
    if (!Number.isInteger(n) || n < 0) throw new RangeError(`msgpack: bad uint ${n}`);
    if (n <= 0x7f) return this.byte(n);
    if (n <= 0xff) return this.byte(0xcc).byte(n);
    if (n <= 0xffff) {
      this.byte(0xcd);
      this.be(n, 2);
    } else if (n <= 0xffffffff) {
      this.byte(0xce);
      this.be(n, 4);
    } else {
      this.byte(0xcf);
      this.be(n, 8);
    }
    return this;
  }

  int(n: number): this {
    if (!Number.isInteger(n)) throw new RangeError(`msgpack: bad int ${n}`);
    if (n >= 0) return this.uint(n);
    if (n >= -32) return this.byte(n & 0xff);
    if (n >= -128) return this.byte(0xd0).byte(n & 0xff);
    if (n >= -32768) {
      this.byte(0xd1);
      this.be(n & 0xffff, 2);
    } else if (n >= -2147483648) {
      this.byte(0xd2);
      this.be(n >>> 0, 4);
    } else {
      this.byte(0xd3);
      this.be(Number(BigInt.asUintN(64, BigInt(n))), 8);
    }
    return this;
  }

  /** Raw-family header (fixraw/raw16/raw32), as go-msgpack writes str and []byte. */
  rawHeader(len: number): this {
    if (len < 32) return this.byte(0xa0 | len);
    if (len < 65536) {
      this.byte(0xda);
      this.be(len, 2);
    } else {
      this.byte(0xdb);
      this.be(len, 4);
    }
    return this;
  }

  str(s: string): this {
    const b = Buffer.from(s, 'utf8');
    this.rawHeader(b.length);
    if (b.length) this.raw(b);
    return this;
  }

  bytes(b: Buffer | null | undefined): this {
    if (b == null) return this.nil();
    this.rawHeader(b.length);
    if (b.length) this.raw(b);
    return this;
  }

  mapHeader(n: number): this {
    if (n < 16) return this.byte(0x80 | n);
    if (n < 65536) {
      this.byte(0xde);
      this.be(n, 2);
    } else {
      this.byte(0xdf);
      this.be(n, 4);
    }
    return this;
  }

  arrayHeader(n: number): this {
    if (n < 16) return this.byte(0x90 | n);
    if (n < 65536) {
      this.byte(0xdc);
      this.be(n, 2);
    } else {
      this.byte(0xdd);
      this.be(n, 4);
    }
    return this;
  }

  /** A Go struct as go-msgpack writes it: a map keyed by field name, sorted. */
  struct(fields: Field[]): this {
    const kept = fields.filter((f) => !(f.omitEmpty && isEmpty(f)));
    kept.sort((a, b) => Buffer.compare(Buffer.from(a.name), Buffer.from(b.name)));
    this.mapHeader(kept.length);
    for (const f of kept) {
      this.str(f.name);
      switch (f.kind) {
        case 'uint':
          this.uint(f.value);
          break;
        case 'int':
          this.int(f.value);
          break;
        case 'str':
          this.str(f.value);
          break;
        case 'bytes':
          this.bytes(f.value);
          break;
        case 'bool':
          this.bool(f.value);
          break;
      }
    }
    return this;
  }

  toBuffer(): Buffer {
    this.flushBytes();
    return this.bufs.length === 1 ? this.bufs[0] : Buffer.concat(this.bufs);
  }
}

function isEmpty(f: Field): boolean {
  switch (f.kind) {
    case 'uint':
    case 'int':
      return f.value === 0;
    case 'str':
      return f.value === '';
    case 'bytes':
      return f.value == null || f.value.length === 0;
    case 'bool':
      return !f.value;
  }
}

/** Decoded value. Strings and byte arrays both come back as Buffer (raw). */
export type MsgValue = null | boolean | number | Buffer | MsgValue[] | MsgMap;
export type MsgMap = Map<string, MsgValue>;

/** Deepest nesting of arrays and maps we decode (memberlist's structs are flat). */
export const MAX_DEPTH = 32;

export class Reader {
  pos: number;
  private depth = 0;
  constructor(
    readonly buf: Buffer,
    offset = 0,
  ) {
    this.pos = offset;
  }

  get remaining(): number {
    return this.buf.length - this.pos;
  }

  private need(n: number): void {
    if (this.pos + n > this.buf.length) throw new IncompleteError();
  }

  u8(): number {
    this.need(1);
    return this.buf[this.pos++];
  }

  take(n: number): Buffer {
    this.need(n);
    const b = this.buf.subarray(this.pos, this.pos + n);
    this.pos += n;
    return b;
  }

  private be(size: 1 | 2 | 4 | 8, signed: boolean): number {
    this.need(size);
    const p = this.pos;
    this.pos += size;
    switch (size) {
      case 1:
        return signed ? this.buf.readInt8(p) : this.buf.readUInt8(p);
      case 2:
        return signed ? this.buf.readInt16BE(p) : this.buf.readUInt16BE(p);
      case 4:
        return signed ? this.buf.readInt32BE(p) : this.buf.readUInt32BE(p);
      case 8:
        return Number(signed ? this.buf.readBigInt64BE(p) : this.buf.readBigUInt64BE(p));
    }
  }

  /** Reads any msgpack value. */
  value(): MsgValue {
    const b = this.u8();
    if (b <= 0x7f) return b;
    if (b >= 0xe0) return b - 0x100;
    if ((b & 0xf0) === 0x80) return this.map(b & 0x0f);
    if ((b & 0xf0) === 0x90) return this.array(b & 0x0f);
    if ((b & 0xe0) === 0xa0) return Buffer.from(this.take(b & 0x1f));
    switch (b) {
      case 0xc0:
        return null;
      case 0xc2:
        return false;
      case 0xc3:
        return true;
      case 0xc4:
      case 0xd9:
        return Buffer.from(this.take(this.be(1, false)));
      case 0xc5:
      case 0xda:
        return Buffer.from(this.take(this.be(2, false)));
      case 0xc6:
      case 0xdb:
        return Buffer.from(this.take(this.be(4, false)));
      case 0xc7:
      case 0xc8:
      case 0xc9: {
        const len = this.be(b === 0xc7 ? 1 : b === 0xc8 ? 2 : 4, false);
        this.u8();
        return Buffer.from(this.take(len));
      }
      case 0xca: {
        this.need(4);
        const v = this.buf.readFloatBE(this.pos);
        this.pos += 4;
        return v;
      }
      case 0xcb: {
        this.need(8);
        const v = this.buf.readDoubleBE(this.pos);
        this.pos += 8;
        return v;
      }
      case 0xcc:
        return this.be(1, false);
      case 0xcd:
        return this.be(2, false);
      case 0xce:
        return this.be(4, false);
      case 0xcf:
        return this.be(8, false);
      case 0xd0:
        return this.be(1, true);
      case 0xd1:
        return this.be(2, true);
      case 0xd2:
        return this.be(4, true);
      case 0xd3:
        return this.be(8, true);
      case 0xd4:
      case 0xd5:
      case 0xd6:
      case 0xd7:
      case 0xd8: {
        const len = [1, 2, 4, 8, 16][b - 0xd4];
        this.u8();
        return Buffer.from(this.take(len));
      }
      case 0xdc:
        return this.array(this.be(2, false));
      case 0xdd:
        return this.array(this.be(4, false));
      case 0xde:
        return this.map(this.be(2, false));
      case 0xdf:
        return this.map(this.be(4, false));
    }
    throw new Error(`msgpack: unsupported type byte 0x${b.toString(16)}`);
  }

  private array(n: number): MsgValue[] {
    // every element takes at least one byte: a huge count in a short buffer fails here, not after allocating
    if (n > this.remaining) throw new IncompleteError();
    if (++this.depth > MAX_DEPTH) throw new Error('msgpack: nested too deeply');
    const out: MsgValue[] = [];
    for (let i = 0; i < n; i++) out.push(this.value());
    this.depth--;
    return out;
  }

  private map(n: number): MsgMap {
    if (2 * n > this.remaining) throw new IncompleteError();
    if (++this.depth > MAX_DEPTH) throw new Error('msgpack: nested too deeply');
    const out: MsgMap = new Map();
    for (let i = 0; i < n; i++) {
      const k = this.value();
      const key = Buffer.isBuffer(k) ? k.toString('utf8') : String(k);
      out.set(key, this.value());
    }
    this.depth--;
    return out;
  }

  /** Reads a value that must be a map (a Go struct). */
  struct(): StructView {
    const v = this.value();
    if (!(v instanceof Map)) throw new Error('msgpack: expected a map for a struct');
    return new StructView(v);
  }
}

/** Typed accessors over a decoded struct; missing fields give Go zero values. */
export class StructView {
  constructor(readonly m: MsgMap) {}

  uint(name: string): number {
    const v = this.m.get(name);
    if (v == null) return 0;
    if (typeof v === 'number') return v;
    if (typeof v === 'boolean') return v ? 1 : 0;
    throw new Error(`msgpack: field ${name} is not a number`);
  }

  int(name: string): number {
    return this.uint(name);
  }

  bool(name: string): boolean {
    const v = this.m.get(name);
    if (v == null) return false;
    if (typeof v === 'boolean') return v;
    if (typeof v === 'number') return v !== 0;
    throw new Error(`msgpack: field ${name} is not a bool`);
  }

  str(name: string): string {
    const v = this.m.get(name);
    if (v == null) return '';
    if (Buffer.isBuffer(v)) return v.toString('utf8');
    throw new Error(`msgpack: field ${name} is not a string`);
  }

  /** A []byte field; null when the field was nil or absent. */
  bytes(name: string): Buffer | null {
    const v = this.m.get(name);
    if (v == null) return null;
    if (Buffer.isBuffer(v)) return v;
    if (Array.isArray(v)) return Buffer.from(v.map((x) => Number(x) & 0xff));
    throw new Error(`msgpack: field ${name} is not bytes`);
  }
}

/**
 * Finds where msgpack values end in a buffer that grows, without decoding
 * them and without rescanning: each call to `scan` resumes where the last
 * one stopped. Costs O(bytes) over the life of a stream however the bytes
 * are chunked, and allocates nothing per value (a huge count is just a
 * number on a stack of at most MAX_DEPTH entries).
 */
export class MsgpackSkipper {
  /** Where scanning stands (absolute offset in the buffers given to scan). */
  pos: number;
  /** Items still to skip at each open nesting level; empty when done. */
  private pending: number[];
  /** Bytes of a raw/str/bin/ext/scalar payload still to skip. */
  private skip = 0;

  /** Skips `count` consecutive values starting at `start`. */
  constructor(start: number, count = 1) {
    this.pos = start;
    this.pending = count > 0 ? [count] : [];
  }

  get done(): boolean {
    return this.pending.length === 0 && this.skip === 0;
  }

  private completeOne(): void {
    const p = this.pending;
    p[p.length - 1]--;
    while (p.length && p[p.length - 1] === 0) {
      p.pop();
      if (p.length) p[p.length - 1]--;
    }
  }

  /** Advances over `buf[pos, end)`; true once all the values are complete. */
  scan(buf: Uint8Array, end = buf.length): boolean {
    for (;;) {
      if (this.skip > 0) {
        const n = Math.min(this.skip, end - this.pos);
        this.pos += n;
        this.skip -= n;
        if (this.skip > 0) return false;
        this.completeOne();
        continue;
      }
      if (this.pending.length === 0) return true;
      if (this.pos >= end) return false;
      const b = buf[this.pos];
      const avail = end - this.pos;
      let head = 1;
      let payload = 0;
      let items = -1; // >= 0: a container of that many values
      const be = (n: number): number | null => {
        if (avail < 1 + n) return null;
        let v = 0;
        for (let i = 1; i <= n; i++) v = v * 256 + buf[this.pos + i];
        return v;
      };
      if (b <= 0x7f || b >= 0xe0 || b === 0xc0 || b === 0xc2 || b === 0xc3) {
        // a scalar in one byte
      } else if ((b & 0xf0) === 0x80) items = 2 * (b & 0x0f);
      else if ((b & 0xf0) === 0x90) items = b & 0x0f;
      else if ((b & 0xe0) === 0xa0) payload = b & 0x1f;
      else {
        let lenBytes = 0;
        let extra = 0; // ext type byte
        let fixed = -1;
        switch (b) {
          case 0xc4:
          case 0xd9:
            lenBytes = 1;
            break;
          case 0xc5:
          case 0xda:
            lenBytes = 2;
            break;
          case 0xc6:
          case 0xdb:
            lenBytes = 4;
            break;
          case 0xc7:
            lenBytes = 1;
            extra = 1;
            break;
          case 0xc8:
            lenBytes = 2;
            extra = 1;
            break;
          case 0xc9:
            lenBytes = 4;
            extra = 1;
            break;
          case 0xca:
          case 0xce:
          case 0xd2:
            fixed = 4;
            break;
          case 0xcb:
          case 0xcf:
          case 0xd3:
            fixed = 8;
            break;
          case 0xcc:
          case 0xd0:
            fixed = 1;
            break;
          case 0xcd:
          case 0xd1:
            fixed = 2;
            break;
          case 0xd4:
          case 0xd5:
          case 0xd6:
          case 0xd7:
          case 0xd8:
            fixed = 1 + [1, 2, 4, 8, 16][b - 0xd4];
            break;
          case 0xdc:
          case 0xdd:
          case 0xde:
          case 0xdf: {
            const n = be(b === 0xdc || b === 0xde ? 2 : 4);
            if (n === null) return false;
            head = 1 + (b === 0xdc || b === 0xde ? 2 : 4);
            items = b >= 0xde ? 2 * n : n;
            break;
          }
          default:
            throw new Error(`msgpack: unsupported type byte 0x${b.toString(16)}`);
        }
        if (fixed >= 0) payload = fixed;
        else if (lenBytes) {
          const n = be(lenBytes);
          if (n === null) return false;
          head = 1 + lenBytes;
          payload = n + extra;
        }
      }
      this.pos += head;
      if (items > 0) {
        if (this.pending.length >= MAX_DEPTH) throw new Error('msgpack: nested too deeply');
        this.pending.push(items);
      } else if (payload > 0) {
        this.skip = payload;
      } else {
        this.completeOne();
      }
    }
  }
}
