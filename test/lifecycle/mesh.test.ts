/**
 * Acceptance (SPEC section 11): a three-node secured mesh, each node with a
 * budget for two of five on-demand sim models (loads of 1–3 s). A trace
 * asking for all five from every entry node is served, no node is ever over
 * its budget (sampled every 100 ms), each load is in the feed with its
 * reason, idle models unload, and a model with a long stream in flight is
 * never unloaded while memory is short. Then two entry nodes asked at once
 * for one unloaded model cause one load, on the host both rank first.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { rendezvousRank } from '../../src/hashing/rendezvous.ts';
import { placementKey } from '../../src/route/placement.ts';
import { getJson, startMeshNode, waitConverged, type MeshNode } from '../helpers/mesh.ts';
import { waitFor } from '../fakes/wait.ts';

const IP = (n: number) => `127.0.110.${n}`;
const GIB = 1024 ** 3;
const MODELS = ['m1', 'm2', 'm3', 'm4', 'm5'];
const models = MODELS.map((name, i) => ({
  name,
  engine: 'sim',
  parallel: 2,
  load: 'on_demand',
  memory: '1GiB',
  idle_unload: '5s',
  // m5 streams long (a 4 s answer) when asked for many tokens; the others answer quickly.
  sim: { ttft_ms: 20, tokens_per_s: 100, output_tokens: name === 'm5' ? 400 : 8, load_ms: 1000 + i * 500 },
}));

async function chat(url: string, model: string, extra: Record<string, unknown> = {}): Promise<{ status: number; retryAfter?: string; text: string; node?: string }> {
  const r = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: `hello ${model}` }], max_tokens: 8, ...extra }),
    headersTimeout: 120_000,
    bodyTimeout: 120_000,
  });
  const text = await r.body.text();
  return { status: r.statusCode, retryAfter: r.headers['retry-after'] as string | undefined, text, node: r.headers['x-viiwork-node'] as string | undefined };
}

describe('models on demand across a three-node secured mesh', () => {
  const secret = crypto.randomBytes(32).toString('base64');
  const nodes: MeshNode[] = [];
  const names = ['od-a', 'od-b', 'od-c'];
  let sampling = true;
  const over: string[] = [];
  let samples = 0;
  let sampler: Promise<void>;

  before(async () => {
    for (let i = 0; i < 3; i++) {
      nodes.push(
        await startMeshNode({
          name: names[i],
          ip: IP(i + 1),
          env: { VIIWORK_MESH_SECRET: secret },
          seeds: i ? [nodes[0].gossip] : [],
          routing: { load_wait: '60s', queue_timeout: '60s', scale_after: '60s' },
          models,
          // Two of the five fit (1 GiB each).
          node: { memory_budget: '2.5GiB' },
        }),
      );
    }
    await waitConverged(nodes);
    sampler = (async () => {
      while (sampling) {
        for (const n of nodes) {
          try {
            const cap = await getJson(`${n.url}/v1/capacity`);
            samples++;
            if (cap.memory.used > cap.memory.budget) over.push(`${n.name}: ${cap.memory.used} > ${cap.memory.budget}`);
          } catch {
            // a node busy answering: the next sample
          }
        }
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
  });
  after(async () => {
    sampling = false;
    await sampler;
    await Promise.all(nodes.map((n) => n.stop()));
  });

  it('serves a trace of all five models from every entry node within budget, a long stream never unloaded, idle models unloaded', async () => {
    // The long stream on m5 first: it holds m5 loaded on its host through the memory pressure that follows.
    const long = chat(nodes[0].url, 'm5', { stream: true, max_tokens: 400 });
    const m5Host = await waitFor(
      async () => {
        for (const n of nodes) {
          const t = (await getJson(`${n.url}/v1/capacity`)).models.find((m: any) => m.name === 'm5')?.targets[0];
          if (t?.busy > 0) return n;
        }
        return undefined;
      },
      { timeoutMs: 30_000, intervalMs: 50, what: 'the long m5 stream running' },
    );
    const m5States: string[] = [];
    let streaming = true;
    const watch = (async () => {
      while (streaming) {
        m5States.push((await getJson(`${m5Host.url}/v1/capacity`)).models.find((m: any) => m.name === 'm5').targets[0].state);
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    const trace: Promise<{ status: number; retryAfter?: string; text: string }>[] = [];
    for (const n of nodes) for (const model of MODELS) for (let k = 0; k < 2; k++) trace.push(chat(n.url, model));
    const results = await Promise.all(trace);
    const l = await long;
    streaming = false;
    await watch;
    for (const r of results) assert.ok(r.status === 200 || ((r.status === 429 || r.status === 503) && Number(r.retryAfter) > 0), `${r.status}: ${r.text.slice(0, 300)}`);
    assert.ok(results.filter((r) => r.status === 200).length >= 25, results.map((r) => r.status).join(','));
    assert.equal(l.status, 200);
    assert.match(l.text, /\[DONE\]/, 'the long stream ran to its end');
    assert.ok(m5States.length > 5 && m5States.every((s) => s === 'loaded'), `m5 on ${m5Host.name} while streaming: ${m5States.join(',')}`);

    // Every model was loaded somewhere, each load in the feed with its reason.
    const feeds = await Promise.all(nodes.map(async (n) => (await getJson(`${n.url}/v1/decisions`)).data));
    const loads = feeds.flat().filter((d: any) => d.lifecycle?.event === 'loaded');
    for (const model of MODELS) assert.ok(loads.some((d: any) => d.model === model && d.lifecycle.reason === 'request' && /asked by|request/.test(d.lifecycle.detail)), `a load of ${model} in the feed: ${JSON.stringify(loads)}`);

    // Idle models unload after idle_unload: every node's memory returns to 0.
    await waitFor(
      async () => {
        for (const n of nodes) if ((await getJson(`${n.url}/v1/capacity`)).memory.used !== 0) return false;
        return true;
      },
      { timeoutMs: 30_000, intervalMs: 200, what: 'every model unloaded when idle' },
    );
    assert.ok(samples > 50, `sampled ${samples} times`);
    assert.deepEqual(over, [], 'no node over its budget');
  });

  it('two entry nodes asking at once for one unloaded model: one load, on the host both rank first', async () => {
    const before = await Promise.all(nodes.map(async (n) => (await getJson(`${n.url}/v1/capacity`)).memory.used));
    assert.deepEqual(before, [0, 0, 0]);
    const loadsOf = async (model: string) => {
      let total = 0;
      for (const n of nodes) {
        const text = await (await request(`${n.url}/metrics`)).body.text();
        const m = new RegExp(`viiwork_model_loads_total\\{model="${model}",reason="request"\\} (\\d+)`).exec(text);
        total += m ? Number(m[1]) : 0;
      }
      return total;
    };
    const was = await loadsOf('m3');
    const [r1, r2] = await Promise.all([chat(nodes[0].url, 'm3'), chat(nodes[1].url, 'm3')]);
    assert.equal(r1.status, 200, r1.text);
    assert.equal(r2.status, 200, r2.text);
    assert.equal((await loadsOf('m3')) - was, 1, 'one load');
    const first = rendezvousRank(placementKey('m3'), names)[0];
    assert.equal(r1.node, first);
    assert.equal(r2.node, first);
    for (const n of nodes) {
      const state = (await getJson(`${n.url}/v1/capacity`)).models.find((m: any) => m.name === 'm3').targets[0].state;
      assert.equal(state, n.name === first ? 'loaded' : 'unloaded', n.name);
    }
  });
});
