/** An on-demand embedded entry (node-llama-cpp inside the node): loaded by a request, disposed when idle (SPEC section 11). */
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { startNode, tempDir, type TestNode } from '../helpers/node.ts';
import { waitFor } from '../fakes/wait.ts';
import { writeTinyGguf } from '../fakes/tiny-gguf.ts';
import { ggufMemory } from '../../src/lifecycle/memory.ts';

const hasLib = await import('node-llama-cpp').then(
  () => true,
  () => false,
);

describe('on-demand embedded model', { skip: hasLib ? false : 'node-llama-cpp (optional dependency) is not installed' }, () => {
  let n: TestNode | undefined;
  after(async () => {
    await n?.stop();
  });

  it('loads on the first request with memory: auto from the GGUF, and is disposed after idle_unload', async () => {
    const file = writeTinyGguf(path.join(tempDir('od-emb'), 'tiny.gguf'));
    n = await startNode({
      node: { name: 'odemb', memory_budget: '1GiB' },
      routing: { queue_timeout: '60s' },
      models: [{ name: 'emb', engine: 'embedded', path: file, parallel: 1, context: 256, load: 'on_demand', memory: 'auto', idle_unload: '2s', workloads: ['chat', 'completion'] }],
    });
    const cap = async () => ((await (await fetch(`${n!.url}/v1/capacity`)).json()) as any).models[0].targets[0];
    assert.equal((await cap()).state, 'unloaded');
    assert.equal((await cap()).memory, (await ggufMemory(file, 256)).total);
    const r = await fetch(`${n.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'emb', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
    });
    assert.equal(r.status, 200, await r.clone().text());
    assert.equal((await cap()).state, 'loaded');
    await waitFor(async () => (await cap()).state === 'unloaded', { timeoutMs: 20_000, intervalMs: 100, what: 'disposed when idle' });
    assert.equal(n.node.backends.find((b) => b.id === 'emb/0')?.state, 'stopped');
  });
});
