/**
 * Today's llama-server keeps a host-RAM prompt cache (`--cache-ram`, SPEC
 * section 3; docs/decisions.md "The RAM prompt cache"). The node sets it
 * itself from the model's `cache_ram` (MiB) so it knows each backend's pool,
 * and turns idle-slot copying off (`--no-cache-idle-slots`): the node names
 * every slot (`id_slot`) and passes `--parallel`, so slots keep their KV and
 * RAM holds what a slot gave up, not a second copy of every idle slot.
 * Flags the operator put in `llamacpp.args` win over the node's.
 *
 * An engine that lists no `--cache-ram` in its `--help` (b4748 and older)
 * gets neither flag, and the model keeps one prompt per slot.
 */
import { execFile } from 'node:child_process';
import type { PoolSettings } from '../cache-model.ts';
import { TODAY_SIMILARITY } from '../../prompt/ram-pool.ts';

/** llama-server's own default (common/common.h `cache_ram_mib`). */
export const ENGINE_CACHE_RAM_MIB = 8192;
/**
 * Bytes a saved slot takes per token beyond its KV (token ids, positions and
 * sequence cells of llama_state_seq_get_data): measured on the tiny test
 * model, 1,500 tokens saved as 792,092 bytes against 768,000 of KV.
 */
export const STATE_OVERHEAD_BYTES_PER_TOKEN = 16;

/** What the node adds to llama-server's command line for its RAM pool, and the pool it then has. */
export interface CacheRamPlan {
  args: string[];
  /** The pool in MiB (−1: no limit), 0 when it has none. */
  mib: number;
  idleSlots: boolean;
  similarity: number;
}

/** The value of flag `names` in `args` (the last one wins, as llama.cpp's parser does); undefined when absent. */
function flagValue(args: readonly string[], names: readonly string[]): string | undefined {
  let v: string | undefined;
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    for (const n of names) {
      if (a === n && i + 1 < args.length) v = args[i + 1];
      else if (a.startsWith(`${n}=`)) v = a.slice(n.length + 1);
    }
  }
  return v;
}

/** The last of the on/off flags in `args`: true, false, or undefined when neither is there. */
function switchValue(args: readonly string[], on: readonly string[], off: readonly string[]): boolean | undefined {
  let v: boolean | undefined;
  for (const a of args) {
    if (on.includes(a)) v = true;
    if (off.includes(a)) v = false;
  }
  return v;
}

/**
 * The flags for a backend of a model with `cache_ram` MiB, given the
 * operator's `args` and whether the binary knows `--cache-ram`. Pure.
 */
export function cacheRamPlan(cacheRamMib: number, userArgs: readonly string[], supported: boolean): CacheRamPlan {
  const userSim = Number(flagValue(userArgs, ['-sps', '--slot-prompt-similarity']));
  const similarity = Number.isFinite(userSim) ? userSim : TODAY_SIMILARITY;
  if (!supported) return { args: [], mib: 0, idleSlots: false, similarity };
  const args: string[] = [];
  const userMib = Number(flagValue(userArgs, ['-cram', '--cache-ram']));
  const mib = Number.isFinite(userMib) ? userMib : cacheRamMib;
  if (!Number.isFinite(userMib)) args.push('--cache-ram', String(cacheRamMib));
  const userIdle = switchValue(userArgs, ['--cache-idle-slots'], ['--no-cache-idle-slots']);
  // With no pool the engine turns idle-slot copying off itself (with a warning): the flag is then left out.
  if (userIdle === undefined && mib !== 0) args.push('--no-cache-idle-slots');
  return { args, mib, idleSlots: mib !== 0 && userIdle === true, similarity };
}

/** The pool as the cache model counts it: MiB over the bytes one token's state takes. */
export function poolSettings(plan: CacheRamPlan, kvBytesPerToken: number | undefined): PoolSettings | undefined {
  if (plan.mib === 0) return undefined;
  const perToken = (kvBytesPerToken ?? 0) + STATE_OVERHEAD_BYTES_PER_TOKEN;
  // Unknown KV size (a GGUF whose shape cannot be read): the pool is there, its limit unknown, taken as unbounded.
  const tokens = plan.mib < 0 || kvBytesPerToken === undefined ? Infinity : Math.floor((plan.mib * 1024 * 1024) / perToken);
  return { tokens, idleSlots: plan.idleSlots, similarity: plan.similarity };
}

const probed = new Map<string, Promise<boolean>>();

/** Does this llama-server know `--cache-ram`? Asked once per binary (`--help`, a few ms); false when it cannot say. */
export function supportsCacheRam(binary: string): Promise<boolean> {
  let p = probed.get(binary);
  if (!p) {
    p = new Promise<boolean>((resolve) => {
      // A binary that does not answer --help at once (a wrapper that starts a server anyway) is killed: no pool known.
      execFile(binary, ['--help'], { timeout: 3_000, killSignal: 'SIGKILL', maxBuffer: 4 << 20 }, (_err, stdout, stderr) => resolve(/--cache-ram\b/.test(`${stdout}\n${stderr}`)));
    });
    probed.set(binary, p);
  }
  return p;
}
