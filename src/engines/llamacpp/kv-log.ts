/**
 * The KV cache size llama-server reports of itself, read from one line of
 * its output, in every form it has printed it:
 *
 * - up to early 2025, at default verbosity:
 *   `llama_init_from_model: KV self size =    1.00 MiB, K (f16):    0.50 MiB, …`
 * - today's, only at `-lv 4` (the llama library's INFO is trace there), after
 *   a timestamp and level prefix:
 *   `0.00.031.041 I llama_kv_cache: size =    1.00 MiB (  2048 cells,   2 layers,  1/1 seqs), K (f16): …`
 * - today's `--log-jsonl`, at any verbosity: a `fit_memory_breakdown`
 *   record whose rows carry `context` (the KV) in whole MiB, so it is exact
 *   only to a MiB.
 *
 * `memory: auto` does not depend on it (lifecycle/memory.ts computes the KV
 * cache from the GGUF, which today's engine matches exactly); the node reads
 * it to check that estimate when the engine says it (docs/decisions.md).
 */

const MIB = 1024 * 1024;
const UNITS: Record<string, number> = { B: 1, KiB: 1024, MiB: MIB, GiB: 1024 * MIB };

export interface KvReport {
  bytes: number;
  /** Which form the line was in. */
  form: 'kv-self-size' | 'kv-cache-size' | 'jsonl';
  /** Whole-MiB rounding (the jsonl record): compare with a MiB of slack. */
  resolution: number;
}

const OLD = /\bKV self size\s*=\s*([\d.]+)\s*(B|KiB|MiB|GiB)\b/;
// "llama_kv_cache: size = …" only: the per-device "CPU KV buffer size = …" lines would count a split cache twice.
const NOW = /\bllama_kv_cache(?:_unified)?:\s+size\s*=\s*([\d.]+)\s*(B|KiB|MiB|GiB)\b/;

/** The KV cache size in one output line, or undefined when the line is not such a report. */
export function parseKvLine(line: string): KvReport | undefined {
  const old = OLD.exec(line);
  if (old) return fromMatch(old, 'kv-self-size');
  const now = NOW.exec(line);
  if (now) return fromMatch(now, 'kv-cache-size');
  if (line.includes('"fit_memory_breakdown"')) return parseJsonl(line);
  return undefined;
}

// Both text forms print two decimals of their unit.
function fromMatch(m: RegExpExecArray, form: KvReport['form']): KvReport {
  const unit = UNITS[m[2]];
  return { bytes: Math.round(Number(m[1]) * unit), form, resolution: 0.01 * unit };
}

function parseJsonl(line: string): KvReport | undefined {
  const start = line.indexOf('{');
  if (start < 0) return undefined;
  try {
    const doc = JSON.parse(line.slice(start)) as { type?: string; data?: { unit?: string; rows?: { context?: unknown }[] } };
    if (doc.type !== 'fit_memory_breakdown' || !Array.isArray(doc.data?.rows)) return undefined;
    const unit = UNITS[doc.data.unit ?? 'MiB'] ?? MIB;
    const context = doc.data.rows.reduce((sum, r) => sum + (typeof r.context === 'number' ? r.context : 0), 0);
    return { bytes: context * unit, form: 'jsonl', resolution: unit };
  } catch {
    return undefined;
  }
}
