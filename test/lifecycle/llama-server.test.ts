/**
 * On-demand loading with the real llama-server (today's llama.cpp, CPU) and the
 * project's tiny GGUF files: a request for an unloaded model is answered after
 * the real load, idle unload stops the process (its pid gone), LRU unloading
 * makes room for a second model on a budget for one, and `memory: auto` comes
 * from the file's metadata. Skips with a message when the engine is absent
 * (test/helpers/engine.ts; fails under CI).
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { ggufMemory } from '../../src/lifecycle/memory.ts';
import { startNode, tempDir, type TestNode } from '../helpers/node.ts';
import { waitFor } from '../fakes/wait.ts';
import { writeTinyGguf } from '../fakes/tiny-gguf.ts';
import { realLlamaServer } from '../helpers/engine.ts';

const { binary: BINARY, skip } = realLlamaServer();
const MIB = 1024 * 1024;

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function chat(url: string, model: string): Promise<{ status: number; body: any }> {
  const r = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
  });
  return { status: r.status, body: (await r.json()) as any };
}

const stateOf = async (url: string, model: string) => ((await (await fetch(`${url}/v1/capacity`)).json()) as any).models.find((m: any) => m.name === model)?.targets[0];
const pidOf = (n: TestNode, id: string) => (n.node.backends.find((b) => b.id === id) as { pid?: number } | undefined)?.pid;

describe('on-demand models with the real llama-server', { skip }, () => {
  const dir = tempDir('od-llama');
  const fileA = writeTinyGguf(path.join(dir, 'a.gguf'), { seed: 1 });
  const fileB = writeTinyGguf(path.join(dir, 'b.gguf'), { seed: 2 });
  const bad = path.join(dir, 'bad.gguf');
  fs.writeFileSync(bad, Buffer.concat([Buffer.from('GGUF'), Buffer.alloc(64, 7)]));
  const entry = (name: string, file: string, extra: Record<string, unknown> = {}) => ({
    name,
    engine: 'llamacpp',
    path: file,
    parallel: 1,
    context: 256,
    load: 'on_demand',
    memory: 'auto',
    idle_unload: '0',
    cache_ram: 16,
    workloads: ['chat', 'completion'],
    // -lv 4: today's llama-server prints its KV cache size only in its trace log (b4748 did at default verbosity).
    llamacpp: { binary: BINARY, args: ['-t', '1', '-lv', '4'] },
    ...extra,
  });
  const nodes: TestNode[] = [];
  after(async () => {
    for (const n of nodes) await n.stop();
  });

  it('loads on the first request, makes room by unloading the LRU model (its process gone), unloads when idle', async () => {
    // Each needs the GGUF's estimate plus the RAM prompt cache it may fill (cache_ram: 16 MiB here).
    const est = await ggufMemory(fileA, 256);
    const need = est.total + 16 * 1024 * 1024;
    // A budget for one of the two.
    const n = await startNode({
      node: { name: 'llod', memory_budget: Math.round(need * 1.5) },
      routing: { queue_timeout: '60s' },
      models: [entry('a', fileA), entry('b', fileB, { idle_unload: '2s' })],
    });
    nodes.push(n);
    const a0 = await stateOf(n.url, 'a');
    assert.equal(a0.state, 'unloaded');
    assert.equal(a0.memory, need, 'memory: auto from the GGUF metadata, and the RAM prompt cache the engine may fill');
    assert.equal(pidOf(n, 'a/0'), undefined, 'nothing runs before a request');

    const ra = await chat(n.url, 'a');
    assert.equal(ra.status, 200, JSON.stringify(ra.body));
    const pidA = pidOf(n, 'a/0');
    assert.ok(pidA && alive(pidA), 'a llama-server runs for a');
    // What llama-server itself says it allocated matches the estimate's KV cache (context × parallel = 256 tokens).
    // The node reads it from the engine's log in whichever form the engine prints it, and says it in its own words.
    const kvLine = n.logs.map((l) => /backend a\/0: llama-server allocated a KV cache of ([\d.]+) MiB/.exec(l)).find(Boolean);
    assert.ok(kvLine, 'llama-server reported its KV cache size');
    assert.ok(Math.abs(Number(kvLine[1]) - est.kvCache / MIB) < 0.01, `llama-server ${kvLine[1]} MiB vs estimate ${est.kvCache / MIB} MiB`);

    const rb = await chat(n.url, 'b');
    assert.equal(rb.status, 200, JSON.stringify(rb.body));
    assert.equal(alive(pidA), false, "a's llama-server was stopped to make room for b");
    assert.equal((await stateOf(n.url, 'a')).state, 'unloaded');
    const pidB = pidOf(n, 'b/0');
    assert.ok(pidB && alive(pidB));
    const cap = (await (await fetch(`${n.url}/v1/capacity`)).json()) as any;
    assert.ok(cap.memory.used <= cap.memory.budget);

    // b unloads after its idle_unload of 2 s: its process is gone.
    await waitFor(async () => (await stateOf(n.url, 'b')).state === 'unloaded', { timeoutMs: 20_000, intervalMs: 100, what: 'b unloaded when idle' });
    await waitFor(() => !alive(pidB), { timeoutMs: 10_000, what: "b's pid gone" });
    assert.equal(((await (await fetch(`${n.url}/v1/capacity`)).json()) as any).memory.used, 0);
  });

  it('a load that fails (a bad file) ends the waiting request with 503 and the engine\'s own error text', async () => {
    const n = await startNode({ node: { name: 'llbad', memory_budget: '1GiB' }, routing: { queue_timeout: '60s' }, models: [entry('broken', bad, { memory: '10MiB' })] });
    nodes.push(n);
    const r = await chat(n.url, 'broken');
    assert.equal(r.status, 503, JSON.stringify(r.body));
    assert.equal(r.body.error.code, 'model_load_failed');
    assert.match(r.body.error.message, /llama-server|exited|error/i);
    const t = await stateOf(n.url, 'broken');
    assert.equal(t.state, 'unloaded');
    assert.ok(t.load_error, 'the capacity report carries the failure');
  });
});
