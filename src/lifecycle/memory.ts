/**
 * How many bytes one backend of a model entry needs (SPEC section 11,
 * `memory: auto`). For a GGUF engine: the weights as they lie in the file,
 * plus the KV cache llama.cpp allocates for `context × parallel` tokens, plus
 * a margin for its compute buffers and the process; for llama-server, plus the
 * host-RAM prompt cache it may fill (`ramPoolBytes`). The GGUF header is read
 * by @huggingface/gguf (a parser we do not write ourselves); the sum is ours,
 * a pure function so it is tested by a table.
 */
import fs from 'node:fs';
import { gguf } from '@huggingface/gguf';
import type { Config, ModelConfig } from '../config/schema.ts';
import type { Finding } from '../config/load.ts';
import { KV_BYTES_PER_ELEMENT, shapeFromMetadata, type GgufShape } from '../engines/gguf-shape.ts';
import { cacheRamPlan, ENGINE_CACHE_RAM_MIB } from '../engines/llamacpp/cache-ram.ts';

// The GGUF's attention shape is the engines' (the RAM prompt cache's bytes per token), read here for the budget.
export { KV_BYTES_PER_ELEMENT, shapeFromMetadata, type GgufShape };

/**
 * The margin added to weights and KV cache: a fixed 64 MiB for compute and
 * output buffers and the process itself, plus 5% of the rest (compute buffers
 * grow with the model). llama-server b4748 on the project's tiny GGUF
 * reports a 5.5 MiB compute buffer; on 7B-class models a few hundred MiB, so
 * the margin errs on the side of never overselling a budget.
 */
export const MEMORY_MARGIN_FIXED = 64 * 1024 * 1024;
export const MEMORY_MARGIN_SHARE = 0.05;

export interface MemoryEstimate {
  weights: number;
  kvCache: number;
  margin: number;
  total: number;
}

/** Weights + KV cache for `tokens` (context × parallel) + the documented margin. */
export function estimateMemory(weightsBytes: number, shape: GgufShape, tokens: number): MemoryEstimate {
  const kvCache = shape.layers * tokens * shape.kvHeads * (shape.keyLength + shape.valueLength) * KV_BYTES_PER_ELEMENT;
  const margin = Math.round(MEMORY_MARGIN_FIXED + MEMORY_MARGIN_SHARE * (weightsBytes + kvCache));
  return { weights: weightsBytes, kvCache, margin, total: weightsBytes + kvCache + margin };
}

/** Read a GGUF file's header and estimate one backend for `tokens` of KV cache. */
export async function ggufMemory(file: string, tokens: number): Promise<MemoryEstimate & { shape: GgufShape }> {
  const { metadata, tensorDataOffset } = await gguf(file, { allowLocalFile: true });
  const shape = shapeFromMetadata(metadata as unknown as Record<string, unknown>);
  // The tensors are what the engine maps: the file less its header.
  const weights = fs.statSync(file).size - Number(tensorDataOffset);
  return { ...estimateMemory(weights, shape, tokens), shape };
}

/**
 * Bytes one backend of this entry needs: the configured size, else (auto)
 * the GGUF estimate for llamacpp and embedded, 0 for openai and sim. A
 * llamacpp backend's estimate also holds the host-RAM prompt cache it may
 * fill (`cache_ram` MiB, or the `--cache-ram` its args set): today's
 * llama-server grows it on its heap up to that cap (SPEC sections 3 and 11).
 * Rejects with a message naming the file when it cannot be read.
 */
export async function entryMemory(m: ModelConfig): Promise<number> {
  if (m.memory !== 'auto') return m.memory;
  if (m.engine !== 'llamacpp' && m.engine !== 'embedded') return 0;
  try {
    return (await ggufMemory(m.path, m.context * m.parallel)).total + (m.engine === 'llamacpp' ? ramPoolBytes(m.cache_ram, m.llamacpp.args) : 0);
  } catch (err) {
    throw new Error(`memory: auto for ${m.name} cannot read ${m.path}: ${(err as Error).message}; set memory to a size such as "8GiB", or fix the path`);
  }
}

/**
 * `viiwork check` on the lifecycle keys (SPEC section 11): an entry that can
 * never fit in this node's budget is a warning naming both figures, and so
 * are `always` entries that together exceed it; `memory: auto` that cannot
 * read its GGUF is a warning (the path checks report a missing file).
 */
export async function memoryFindings(config: Config, budgetBytes: number, budgetSource: string): Promise<Finding[]> {
  const out: Finding[] = [];
  let always = 0;
  for (const [i, m] of config.models.entries()) {
    // A missing file is the path check's finding; it is not repeated here.
    if ((m.engine === 'llamacpp' || m.engine === 'embedded') && m.memory === 'auto' && !fs.existsSync(m.path)) continue;
    let per: number;
    try {
      per = await entryMemory(m);
    } catch (err) {
      out.push({ level: 'warning', key: `models[${i}].memory`, message: (err as Error).message, fix: 'set memory to a size, or point path at a readable GGUF file' });
      continue;
    }
    const need = per * m.replicas;
    if (m.load === 'always') always += need;
    // A split entry bigger than this budget runs across lending members (SPEC section 11): not a warning.
    const split = m.engine === 'llamacpp' && m.split !== false;
    if (need > budgetBytes && !split)
      out.push({
        level: 'warning',
        key: `models[${i}].memory`,
        message: `${m.name} needs ${fmt(need)}${m.replicas > 1 ? ` (${m.replicas} replicas × ${fmt(per)})` : ''} but node.memory_budget is ${fmt(budgetBytes)} (${budgetSource}): it can never ${m.load === 'on_demand' ? 'load' : 'fit'} here`,
        fix: 'raise node.memory_budget, lower context or parallel, or serve this model from a bigger machine',
      });
  }
  if (always > budgetBytes && !out.some((f) => f.key.endsWith('.memory') && /always/.test(f.message)))
    out.push({
      level: 'warning',
      key: 'node.memory_budget',
      message: `the load: always entries need ${fmt(always)} together, more than node.memory_budget ${fmt(budgetBytes)} (${budgetSource}); on-demand models cannot load beside them`,
      fix: 'make some entries load: on_demand, or raise node.memory_budget',
    });
  return out;
}

function fmt(n: number): string {
  return n >= 1024 ** 3 ? `${(n / 1024 ** 3).toFixed(1)} GiB` : `${(n / 1024 ** 2).toFixed(1)} MiB`;
}

/**
 * The host RAM a llama-server's prompt cache may take: `cache_ram` MiB, or
 * what `--cache-ram` in the entry's args says (an unlimited `-1` there is
 * counted as the engine's default, the most the node can know). Counted
 * whatever the binary: an old build without the pool is overcounted, never a
 * new one under.
 */
export function ramPoolBytes(cacheRamMib: number, args: readonly string[]): number {
  const mib = cacheRamPlan(cacheRamMib, args, true).mib;
  return (mib < 0 ? ENGINE_CACHE_RAM_MIB : mib) * 1024 * 1024;
}
