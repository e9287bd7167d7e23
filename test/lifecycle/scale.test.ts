/**
 * One more copy under sustained queueing (SPEC section 11, routing.scale_after):
 * requests queued for scale_after on a model whose one copy is busy load a
 * second copy on another host, the queue drains faster, and the copy unloads
 * when idle.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { request } from 'undici';
import { getJson, startMeshNode, waitConverged, type MeshNode } from '../helpers/mesh.ts';
import { waitFor } from '../fakes/wait.ts';

const IP = (n: number) => `127.0.111.${n}`;

async function chat(url: string): Promise<{ status: number; node?: string; ms: number }> {
  const t0 = performance.now();
  const r = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'slow', messages: [{ role: 'user', content: 'hi' }] }),
    headersTimeout: 120_000,
    bodyTimeout: 120_000,
  });
  await r.body.text();
  return { status: r.statusCode, node: r.headers['x-viiwork-node'] as string | undefined, ms: performance.now() - t0 };
}

describe('scale_after: one more copy under sustained queueing', () => {
  const nodes: MeshNode[] = [];
  after(async () => {
    await Promise.all(nodes.map((n) => n.stop()));
  });

  it('a second host loads a copy after scale_after of queueing; it unloads when idle', async () => {
    const model = { name: 'slow', engine: 'sim', parallel: 1, load: 'on_demand', memory: '1GiB', idle_unload: '3s', sim: { ttft_ms: 400, tokens_per_s: 1000, output_tokens: 4, load_ms: 300 } };
    for (let i = 0; i < 2; i++)
      nodes.push(
        await startMeshNode({
          name: `sc-${i}`,
          ip: IP(i + 1),
          seeds: i ? [nodes[0].gossip] : [],
          node: { memory_budget: '2GiB' },
          routing: { scale_after: '1s', queue_timeout: '60s', load_wait: '60s' },
          models: [model],
        }),
      );
    await waitConverged(nodes);
    // 12 requests of 400 ms each at once, all entering sc-0: one copy alone needs about 5 s.
    const results = await Promise.all(Array.from({ length: 12 }, () => chat(nodes[0].url)));
    assert.deepEqual(results.map((r) => r.status), Array(12).fill(200));
    const served = new Set(results.map((r) => r.node));
    assert.equal(served.size, 2, `both hosts served: ${[...results.map((r) => r.node)].join(',')}`);
    const text = (await Promise.all(nodes.map(async (n) => (await request(`${n.url}/metrics`)).body.text()))).join('\n');
    assert.match(text, /viiwork_model_loads_total\{model="slow",reason="scale"\} 1/);
    assert.match(text, /viiwork_model_loads_total\{model="slow",reason="request"\} 1/);
    const last = Math.max(...results.map((r) => r.ms));
    assert.ok(last < 12 * 400, `the queue drained faster than one copy could (${Math.round(last)} ms)`);
    // Both copies unload when idle.
    await waitFor(async () => (await Promise.all(nodes.map(async (n) => (await getJson(`${n.url}/v1/capacity`)).memory.used))).every((u) => u === 0), {
      timeoutMs: 20_000,
      intervalMs: 200,
      what: 'both copies unloaded',
    });
  });
});
