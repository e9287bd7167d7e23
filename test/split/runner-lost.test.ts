/**
 * Issue 45: a runner that dies frees its lenders' memory. The runner of a
 * split model is killed (its node and its engines at once, as when its
 * machine dies); the lender sees its lease not renewed (or the member
 * dead) and stops its ggml-rpc-server, its budget whole again.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { ggufMemory } from '../../src/lifecycle/memory.ts';
import { waitFor } from '../fakes/wait.ts';
import { writeTinyGguf } from '../fakes/tiny-gguf.ts';
import { realLlamaServer } from '../helpers/engine.ts';
import { rpcChildren } from '../helpers/procs.ts';
import { getJson, startMeshNode, waitConverged, type MeshNode } from '../helpers/mesh.ts';
import { tempDir } from '../helpers/node.ts';

const { binary: LLAMA, rpcServer, skip } = realLlamaServer();
const IP = (n: number) => `127.0.238.${n}`;


describe('a runner killed while its model runs split', { skip: skip || (!rpcServer && 'no ggml-rpc-server beside llama-server') }, () => {
  const dir = tempDir('split-runner-');
  const file = writeTinyGguf(path.join(dir, 'big.gguf'), { seed: 8, nLayers: 4 });
  const nodes: MeshNode[] = [];
  let budget = 0;

  before(async () => {
    budget = Math.floor((await ggufMemory(file, 256)).total * 0.6);
    const entry = { name: 'big', engine: 'llamacpp', path: file, parallel: 1, context: 256, cache_ram: 0, load: 'on_demand', idle_unload: '0', split: 'auto', workloads: ['chat'], llamacpp: { binary: LLAMA, args: ['-t', '1'] } };
    nodes.push(await startMeshNode({ name: 'runner', ip: IP(1), node: { memory_budget: budget, rpc_server: rpcServer }, models: [entry], routing: { load_wait: '30s', queue_timeout: '30s' } }));
    nodes.push(await startMeshNode({ name: 'lender', ip: IP(2), seeds: [nodes[0].gossip], node: { memory_budget: budget, lend_memory: true, rpc_server: rpcServer } }));
    await waitConverged(nodes);
  });
  after(async () => {
    await Promise.all(nodes.map((n) => n.stop()));
  });

  it('frees the lender: its lend ends, its rpc-server stops, its budget is whole again', async () => {
    const [runner, lender] = nodes;
    const r = await request(`${lender.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'big', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
      headersTimeout: 60_000,
    });
    const text = await r.body.text();
    assert.equal(r.statusCode, 200, text);
    const lent = await getJson(`${lender.url}/v1/capacity`);
    assert.equal(lent.lending.lends.length, 1);
    assert.equal(rpcChildren(lender.proc.pid!).length, 1);
    runner.proc.kill('SIGKILL');
    await waitFor(async () => (await getJson(`${lender.url}/v1/capacity`)).memory.used === 0, { timeoutMs: 30_000, intervalMs: 250, what: 'the lend freed' });
    assert.deepEqual((await getJson(`${lender.url}/v1/capacity`)).lending, { lent: 0, lends: [] });
    await waitFor(() => rpcChildren(lender.proc.pid!).length === 0, { timeoutMs: 10_000, what: 'its rpc-server stopped' });
    assert.match(lender.logs(), /lend \S+ of .* to runner for big ended: (runner stopped renewing its lease|runner is dead|runner is no longer)/);
  });
});
