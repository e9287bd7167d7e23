/**
 * A tiny llama-architecture model in GGUF v3, written by our own code, for
 * tests of the embedded engine: F32 random weights from a fixed seed, a
 * SentencePiece-style vocab (BOS/EOS/UNK, ChatML markers, printable ASCII,
 * then the 256 byte tokens that any other byte falls back to), n_embd 64,
 * 2 layers, context 256 and a ChatML chat template. About 0.5 MB; it loads
 * and generates nonsense, the same nonsense for the same seed.
 *
 * Layout (llama.cpp's docs/gguf.md): "GGUF", version, tensor count, kv
 * count; the key/values; the tensor infos (name, dims innermost first, type,
 * offset into the data); padding to `general.alignment` (32); the data.
 */
import fs from 'node:fs';
import { seeded } from '../helpers/random.ts';

export interface TinyGgufOptions {
  seed?: number;
  nEmbd?: number;
  nLayers?: number;
  nHeads?: number;
  nFf?: number;
  contextLength?: number;
}

const ALIGN = 32;
// GGUF value types and the ggml tensor type we use.
const T_U32 = 4, T_I32 = 5, T_F32 = 6, T_STRING = 8, T_ARRAY = 9;
const GGML_F32 = 0;
// llama.cpp token types.
const NORMAL = 1, UNKNOWN = 2, CONTROL = 3, BYTE = 6;

type Value = { u32: number } | { f32: number } | string | { strings: string[] } | { f32s: number[] } | { i32s: number[] };

class Writer {
  parts: Buffer[] = [];
  size = 0;
  push(b: Buffer): void {
    this.parts.push(b);
    this.size += b.length;
  }
  u32(n: number): void {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(n);
    this.push(b);
  }
  u64(n: number): void {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(n));
    this.push(b);
  }
  str(s: string): void {
    const b = Buffer.from(s, 'utf8');
    this.u64(b.length);
    this.push(b);
  }
  value(v: Value): void {
    if (typeof v === 'string') return (this.u32(T_STRING), this.str(v));
    if ('u32' in v) return (this.u32(T_U32), this.u32(v.u32));
    if ('f32' in v) return (this.u32(T_F32), this.push(f32Buffer([v.f32])));
    this.u32(T_ARRAY);
    if ('strings' in v) return (this.u32(T_STRING), this.u64(v.strings.length), v.strings.forEach((s) => this.str(s)));
    if ('f32s' in v) return (this.u32(T_F32), this.u64(v.f32s.length), this.push(f32Buffer(v.f32s)));
    this.u32(T_I32);
    this.u64(v.i32s.length);
    const b = Buffer.alloc(4 * v.i32s.length);
    v.i32s.forEach((x, i) => b.writeInt32LE(x, 4 * i));
    this.push(b);
  }
  pad(): void {
    const rest = (ALIGN - (this.size % ALIGN)) % ALIGN;
    if (rest) this.push(Buffer.alloc(rest));
  }
}

function f32Buffer(xs: ArrayLike<number>): Buffer {
  return Buffer.from(Float32Array.from(xs).buffer);
}

/** The GGUF bytes of the tiny model. */
export function tinyGguf(opts: TinyGgufOptions = {}): Buffer {
  const { seed = 42, nEmbd = 64, nLayers = 2, nHeads = 4, nFf = 128, contextLength = 256 } = opts;
  const tokens = ['<unk>', '<s>', '</s>', '<|im_start|>', '<|im_end|>'];
  const types = [UNKNOWN, CONTROL, CONTROL, CONTROL, CONTROL];
  for (let c = 0x20; c < 0x7f; c++) (tokens.push(c === 0x20 ? '\u2581' : String.fromCharCode(c)), types.push(NORMAL));
  for (let b = 0; b < 256; b++) (tokens.push(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`), types.push(BYTE));
  const nVocab = tokens.length;

  const kv: [string, Value][] = [
    ['general.architecture', 'llama'],
    ['general.name', 'viiwork-tiny-test'],
    ['general.alignment', { u32: ALIGN }],
    ['llama.context_length', { u32: contextLength }],
    ['llama.embedding_length', { u32: nEmbd }],
    ['llama.block_count', { u32: nLayers }],
    ['llama.feed_forward_length', { u32: nFf }],
    ['llama.attention.head_count', { u32: nHeads }],
    ['llama.attention.head_count_kv', { u32: nHeads }],
    ['llama.rope.dimension_count', { u32: nEmbd / nHeads }],
    ['llama.attention.layer_norm_rms_epsilon', { f32: 1e-5 }],
    ['tokenizer.ggml.model', 'llama'],
    ['tokenizer.ggml.tokens', { strings: tokens }],
    ['tokenizer.ggml.scores', { f32s: tokens.map((_, i) => -i) }],
    ['tokenizer.ggml.token_type', { i32s: types }],
    ['tokenizer.ggml.unknown_token_id', { u32: 0 }],
    ['tokenizer.ggml.bos_token_id', { u32: 1 }],
    ['tokenizer.ggml.eos_token_id', { u32: 2 }],
    [
      'tokenizer.chat_template',
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
    ],
  ];

  // name, dims (innermost first); norms are ones, everything else small random values.
  const shapes: [string, number[]][] = [['token_embd.weight', [nEmbd, nVocab]]];
  for (let l = 0; l < nLayers; l++) {
    const p = `blk.${l}.`;
    shapes.push(
      [p + 'attn_norm.weight', [nEmbd]],
      [p + 'attn_q.weight', [nEmbd, nEmbd]],
      [p + 'attn_k.weight', [nEmbd, nEmbd]],
      [p + 'attn_v.weight', [nEmbd, nEmbd]],
      [p + 'attn_output.weight', [nEmbd, nEmbd]],
      [p + 'ffn_norm.weight', [nEmbd]],
      [p + 'ffn_gate.weight', [nEmbd, nFf]],
      [p + 'ffn_up.weight', [nEmbd, nFf]],
      [p + 'ffn_down.weight', [nFf, nEmbd]],
    );
  }
  shapes.push(['output_norm.weight', [nEmbd]], ['output.weight', [nEmbd, nVocab]]);

  const w = new Writer();
  w.push(Buffer.from('GGUF', 'ascii'));
  w.u32(3);
  w.u64(shapes.length);
  w.u64(kv.length);
  for (const [k, v] of kv) (w.str(k), w.value(v));

  const random = seeded(seed);
  const data: Buffer[] = [];
  let offset = 0;
  for (const [name, dims] of shapes) {
    const n = dims.reduce((a, b) => a * b, 1);
    const values = new Float32Array(n);
    for (let i = 0; i < n; i++) values[i] = name.endsWith('norm.weight') ? 1 : (random() - 0.5) * 0.5;
    w.str(name);
    w.u32(dims.length);
    dims.forEach((d) => w.u64(d));
    w.u32(GGML_F32);
    w.u64(offset);
    const bytes = Buffer.from(values.buffer);
    const padded = Math.ceil(bytes.length / ALIGN) * ALIGN;
    data.push(bytes, Buffer.alloc(padded - bytes.length));
    offset += padded;
  }
  w.pad();
  for (const d of data) w.push(d);
  return Buffer.concat(w.parts, w.size);
}

/** Write the tiny model to `file`; returns the path. */
export function writeTinyGguf(file: string, opts?: TinyGgufOptions): string {
  fs.writeFileSync(file, tinyGguf(opts));
  return file;
}
