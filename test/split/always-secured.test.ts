/**
 * Issue 45 in a secured mesh: an `always` entry bigger than its node, with
 * `split: [lender]`, is placed by its node as soon as the member it names
 * lends enough (no request needed), through signed lend asks and the
 * TLS tunnel; a lending member the entry does not name is never asked,
 * even with more room.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { ggufMemory } from '../../src/lifecycle/memory.ts';
import { waitFor } from '../fakes/wait.ts';
import { writeTinyGguf } from '../fakes/tiny-gguf.ts';
import { realLlamaServer } from '../helpers/engine.ts';
import { getJson, startMeshNode, waitConverged, type MeshNode } from '../helpers/mesh.ts';
import { tempDir } from '../helpers/node.ts';

const { binary: LLAMA, rpcServer, skip } = realLlamaServer();
const IP = (n: number) => `127.0.237.${n}`;

describe('an always entry split across the member it names, in a secured mesh', { skip: skip || (!rpcServer && 'no ggml-rpc-server beside llama-server') }, () => {
  const secret = crypto.randomBytes(32).toString('base64');
  const env = { VIIWORK_MESH_SECRET: secret };
  const dir = tempDir('split-always-');
  const file = writeTinyGguf(path.join(dir, 'big.gguf'), { seed: 3, nLayers: 4 });
  const nodes: MeshNode[] = [];
  let budget = 0;
  const entry = { name: 'big', engine: 'llamacpp', path: file, parallel: 1, context: 256, cache_ram: 0, split: ['lender'], workloads: ['chat', 'completion'], llamacpp: { binary: LLAMA, args: ['-t', '1'] } };

  before(async () => {
    budget = Math.floor((await ggufMemory(file, 256)).total * 0.6);
    nodes.push(await startMeshNode({ name: 'runner', ip: IP(1), env, node: { memory_budget: budget, rpc_server: rpcServer }, models: [entry] }));
    // A lender with room for all of it, but not one the entry names.
    nodes.push(await startMeshNode({ name: 'other', ip: IP(2), env, seeds: [nodes[0].gossip], node: { memory_budget: budget * 3, lend_memory: true, rpc_server: rpcServer } }));
    await waitConverged(nodes);
  });
  after(async () => {
    await Promise.all(nodes.map((n) => n.stop()));
  });

  it('waits for the member it names, then loads across it without a request, and answers', async () => {
    const [runner, other] = nodes;
    // With only a lender it does not name, it stays unloaded, and the refusal says why once.
    await waitFor(() => /refused to load big: .*no split/.test(runner.logs()), { timeoutMs: 20_000, what: 'the refusal in the log' });
    assert.equal((await getJson(`${runner.url}/v1/capacity`)).models[0].targets[0].state, 'unloaded');
    assert.deepEqual((await getJson(`${other.url}/v1/capacity`)).lending, { lent: 0, lends: [] }, 'the member it does not name lends nothing');

    nodes.push(await startMeshNode({ name: 'lender', ip: IP(3), env, seeds: [runner.gossip], node: { memory_budget: budget, lend_memory: true, rpc_server: rpcServer } }));
    await waitFor(
      async () => (await getJson(`${runner.url}/v1/capacity`)).models[0].targets[0].state === 'loaded',
      { timeoutMs: 60_000, intervalMs: 250, what: 'the always entry placed across the named lender' },
    );
    const t = (await getJson(`${runner.url}/v1/capacity`)).models[0].targets[0];
    assert.deepEqual(t.split.parts.map((p: any) => p.member), ['runner', 'lender']);
    assert.deepEqual(t.split.lenders, ['lender']);
    assert.equal((await getJson(`${other.url}/v1/capacity`)).lending.lent, 0);
    const r = await request(`${other.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'big', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8, temperature: 0 }),
    });
    const doc = JSON.parse(await r.body.text());
    assert.equal(r.statusCode, 200, JSON.stringify(doc));
    assert.equal(r.headers['x-viiwork-node'], 'runner');
    assert.equal(doc.usage.completion_tokens, 8);
    const feed = (await getJson(`${runner.url}/v1/decisions`)).data;
    assert.ok(feed.some((d: any) => d.model === 'big' && d.lifecycle?.event === 'loaded' && d.lifecycle.reason === 'start'), 'loaded by its node, not by a request');
  });
});
