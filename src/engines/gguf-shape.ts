/**
 * What a GGUF's metadata says of its attention: the shape that sizes
 * llama.cpp's KV cache, per token (the RAM prompt cache's unit, and the
 * memory budget's, lifecycle/memory.ts). Pure.
 */

/** Bytes per KV cache element: llama-server's default cache type is f16 for both K and V. */
export const KV_BYTES_PER_ELEMENT = 2;
/** What a GGUF's metadata says of its attention, for the KV cache. */
export interface GgufShape {
  architecture: string;
  layers: number;
  heads: number;
  kvHeads: number;
  /** Per-head key and value sizes (llama.cpp's n_embd_head_k / _v). */
  keyLength: number;
  valueLength: number;
}

/** The attention shape from GGUF metadata (llama.cpp's keys: `{arch}.block_count`, `{arch}.attention.*`). */
export function shapeFromMetadata(meta: Record<string, unknown>): GgufShape {
  const arch = String(meta['general.architecture'] ?? '');
  if (!arch) throw new Error('the GGUF has no general.architecture');
  const num = (key: string): number | undefined => {
    const v = meta[`${arch}.${key}`];
    if (typeof v === 'number') return v;
    if (typeof v === 'bigint') return Number(v);
    // Per-layer arrays (some architectures): the largest layer bounds the cache.
    if (Array.isArray(v) && v.length) return Math.max(...v.map(Number));
    return undefined;
  };
  const layers = num('block_count');
  const heads = num('attention.head_count');
  const embd = num('embedding_length');
  if (!layers || !heads || !embd) throw new Error(`the GGUF lacks ${arch}.block_count, .attention.head_count or .embedding_length`);
  const kvHeads = num('attention.head_count_kv') ?? heads;
  const keyLength = num('attention.key_length') ?? embd / heads;
  const valueLength = num('attention.value_length') ?? embd / heads;
  return { architecture: arch, layers, heads, kvHeads, keyLength, valueLength };
}

/** KV bytes one token takes in one slot (all layers, K and V). */
export function kvBytesPerToken(shape: GgufShape): number {
  return shape.layers * shape.kvHeads * (shape.keyLength + shape.valueLength) * KV_BYTES_PER_ELEMENT;
}
