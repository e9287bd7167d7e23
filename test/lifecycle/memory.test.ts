import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { budgetFromGpu, MemoryBudget, parseNvidiaApps, parseNvidiaGpus, parseRocmSmi, queryGpus, ramBudget } from '../../src/lifecycle/budget.ts';
import { estimateMemory, ggufMemory, MEMORY_MARGIN_FIXED, shapeFromMetadata } from '../../src/lifecycle/memory.ts';
import { writeTinyGguf } from '../fakes/tiny-gguf.ts';
import { tempDir } from '../helpers/node.ts';

const MIB = 1024 * 1024;
const fixture = (f: string) => fs.readFileSync(path.resolve('test/fixtures/gpu', f), 'utf8');

describe('memory: auto from the GGUF', () => {
  it('KV cache is layers × tokens × kv heads × (key + value length) × 2 bytes', () => {
    // A 7B-class llama shape: 32 layers, 8 KV heads of 128, 8192 tokens → 1 GiB of f16 cache.
    const e = estimateMemory(4 * 1024 * MIB, { architecture: 'llama', layers: 32, heads: 32, kvHeads: 8, keyLength: 128, valueLength: 128 }, 8192);
    assert.equal(e.kvCache, 1024 * MIB);
    assert.equal(e.total, e.weights + e.kvCache + e.margin);
    assert.equal(e.margin, Math.round(MEMORY_MARGIN_FIXED + 0.05 * 5 * 1024 * MIB));
  });

  it('head sizes default to embedding ÷ heads and KV heads to heads', () => {
    const s = shapeFromMetadata({ 'general.architecture': 'qwen2', 'qwen2.block_count': 24, 'qwen2.attention.head_count': 14, 'qwen2.embedding_length': 896 });
    assert.deepEqual(s, { architecture: 'qwen2', layers: 24, heads: 14, kvHeads: 14, keyLength: 64, valueLength: 64 });
    assert.throws(() => shapeFromMetadata({ 'general.architecture': 'llama' }), /block_count/);
  });

  it('from a real GGUF file: the KV cache and weights llama-server b4748 reports loading it', async () => {
    const file = writeTinyGguf(path.join(tempDir('mem'), 'tiny.gguf'), { seed: 1 });
    const e = await ggufMemory(file, 512);
    // llama-server -c 512 on this file: "KV self size = 0.25 MiB", "CPU_Mapped model buffer size = 0.49 MiB".
    assert.equal(e.kvCache, 0.25 * MIB);
    assert.ok(Math.abs(e.weights / MIB - 0.49) < 0.01, `weights ${e.weights}`);
    assert.deepEqual(e.shape, { architecture: 'llama', layers: 2, heads: 4, kvHeads: 4, keyLength: 16, valueLength: 16 });
  });
});

describe('memory_budget: auto', () => {
  it('nvidia-smi: totals over GPUs, processes not ours count against the budget', () => {
    const gpus = parseNvidiaGpus(fixture('nvidia-smi-gpus.csv'))!;
    assert.equal(gpus.total, 2 * 24564 * MIB);
    assert.equal(gpus.used, (18211 + 1203) * MIB);
    const apps = parseNvidiaApps(fixture('nvidia-smi-apps.csv'));
    assert.equal(apps.get(41231), 9102 * MIB);
    // Our engines are 41231 and 41388; the rest of what is used (desktop, another process) is others'.
    const b = budgetFromGpu({ tool: 'nvidia-smi', ...gpus, byPid: apps }, new Set([41231, 41388]), 0);
    assert.equal(b, gpus.total - (gpus.used - (9102 + 6800) * MIB));
  });

  it('rocm-smi: totals over cards; others = used less what our backends account for', () => {
    const r = parseRocmSmi(fixture('rocm-smi-meminfo.json'))!;
    assert.equal(r.total, 2 * 25753026560);
    assert.equal(r.used, 6442450944 + 1073741824);
    assert.equal(budgetFromGpu({ tool: 'rocm-smi', ...r }, new Set(), 4 * 1024 * MIB), r.total - (r.used - 4 * 1024 * MIB));
    // Never oversold: our accounting larger than what is used leaves others at 0, not negative.
    assert.equal(budgetFromGpu({ tool: 'rocm-smi', ...r }, new Set(), 100 * 1024 * MIB), r.total);
    assert.equal(parseRocmSmi('not json'), undefined);
  });

  it('no GPU tool: 75% of RAM; a tool that answers is read through the runner', async () => {
    assert.equal(await queryGpus(async () => Promise.reject(new Error('ENOENT'))), undefined);
    const none = new MemoryBudget('auto', undefined, async () => Promise.reject(new Error('ENOENT')));
    await none.refresh();
    assert.equal(none.bytes, ramBudget());
    assert.equal(none.source, '75% of RAM');
    const nv = new MemoryBudget('auto', () => ({ pids: new Set([41231, 41388]), accounted: 0 }), async (cmd, args) => {
      assert.equal(cmd, 'nvidia-smi');
      return args[0].startsWith('--query-gpu') ? fixture('nvidia-smi-gpus.csv') : fixture('nvidia-smi-apps.csv');
    });
    await nv.refresh();
    assert.equal(nv.bytes, 2 * 24564 * MIB - (18211 + 1203 - 9102 - 6800) * MIB);
    assert.match(nv.source, /nvidia-smi/);
    const rocm = new MemoryBudget('auto', undefined, async (cmd) => (cmd === 'rocm-smi' ? fixture('rocm-smi-meminfo.json') : Promise.reject(new Error('ENOENT'))));
    await rocm.refresh();
    assert.match(rocm.source, /rocm-smi/);
    const fixed = new MemoryBudget(8 * 1024 * MIB);
    await fixed.refresh();
    assert.equal(fixed.bytes, 8 * 1024 * MIB);
  });

  it('a GPU tool that is not installed is not run again (spawning a missing binary stalls the event loop)', async () => {
    const calls: string[] = [];
    const enoent = () => Object.assign(new Error('spawn nvidia-smi ENOENT'), { code: 'ENOENT' });
    const b = new MemoryBudget('auto', undefined, async (cmd) => {
      calls.push(cmd);
      throw enoent();
    });
    await b.start();
    await b.refresh();
    b.stop();
    assert.deepEqual(calls, ['nvidia-smi', 'rocm-smi'], 'each tried once, at start');
    // A tool that is there but fails (a driver hiccup) is asked again next time.
    const flaky: string[] = [];
    const c = new MemoryBudget('auto', undefined, async (cmd) => {
      flaky.push(cmd);
      throw new Error('NVIDIA-SMI has failed');
    });
    await c.refresh();
    await c.refresh();
    assert.deepEqual(flaky, ['nvidia-smi', 'rocm-smi', 'nvidia-smi', 'rocm-smi']);
  });
});
