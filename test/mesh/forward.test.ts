/** Issue 4, acceptance 1–3: a model served only elsewhere, forwards refused and retried, the mesh-wide queue. */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { Agent, request } from 'undici';
import { startFakeEngine, type FakeEngine } from '../fakes/fake-engine.ts';
import { waitFor } from '../fakes/wait.ts';
import { getJson, startMeshNode, stopAll, waitConverged, waitModelOn, postJson as post, type MeshNode } from '../helpers/mesh.ts';

const IP = (n: number) => `127.0.20.${n}`;

describe('forwarding across the mesh', () => {
  let engB: FakeEngine;
  let engC: FakeEngine;
  let a: MeshNode, b: MeshNode, c: MeshNode;
  before(async () => {
    engB = await startFakeEngine({ name: 'engB', outputTokens: 3 });
    engC = await startFakeEngine({ name: 'engC', outputTokens: 3 });
    // A polls slowly, so its view of B can be out of date on purpose (stale_after is long enough that it is still used).
    a = await startMeshNode({ name: 'A', ip: IP(1), routing: { queue_timeout: '3s', stale_after: '20s' }, mesh: { capacity_poll: '3s' } });
    b = await startMeshNode({ name: 'B', ip: IP(2), seeds: [a.gossip], models: [{ name: 'shared', engine: 'openai', url: engB.url, parallel: 1 }] });
    c = await startMeshNode({
      name: 'C',
      ip: IP(3),
      seeds: [a.gossip],
      models: [
        { name: 'only-c', engine: 'openai', url: engC.url, parallel: 2 },
        { name: 'shared', engine: 'openai', url: engC.url, parallel: 1 },
      ],
    });
    await waitConverged([a, b, c]);
    await waitModelOn(a, 'only-c', ['C']);
    await waitModelOn(a, 'shared', ['B', 'C']);
  });
  after(async () => {
    await stopAll([a, b, c]);
    await engB?.close();
    await engC?.close();
  });

  it('runs a model served only on C through A, streamed and not, with the openai SDK', async () => {
    const client = new OpenAI({ baseURL: `${a.url}/v1`, apiKey: 'none', maxRetries: 0 });
    const { data, response } = await client.chat.completions.create({ model: 'only-c', messages: [{ role: 'user', content: 'hi' }] }).withResponse();
    assert.ok(data.choices[0].message.content);
    assert.equal(response.headers.get('x-viiwork-node'), 'C');
    assert.equal(response.headers.get('x-viiwork-origin'), 'A');
    const { data: stream, response: sres } = await client.chat.completions.create({ model: 'only-c', stream: true, messages: [{ role: 'user', content: 'hi' }] }).withResponse();
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
    assert.ok(text.length > 0);
    assert.equal(sres.headers.get('x-viiwork-node'), 'C');
    assert.equal(sres.headers.get('x-viiwork-origin'), 'A');
    assert.equal(sres.headers.get('content-type')?.startsWith('text/event-stream'), true);
  });

  it('lists the whole mesh’s models on every node, identically', async () => {
    // Each node lists a member's models once it has that member's first report (B and C poll each other on their own).
    for (const n of [b, c]) {
      await waitModelOn(n, 'only-c', ['C']);
      await waitModelOn(n, 'shared', ['B', 'C']);
    }
    const docs = await Promise.all([a, b, c].map((n) => getJson(`${n.url}/v1/models`)));
    const strip = (d: any) => JSON.stringify(d.data.map((m: any) => ({ ...m, hosts: undefined })));
    assert.equal(strip(docs[0]), strip(docs[1]));
    assert.equal(strip(docs[0]), strip(docs[2]));
    assert.deepEqual(docs[0].data.map((m: any) => m.id), ['only-c', 'shared']);
  });

  it('a forward to a node with no free slot gets 429 at once', async () => {
    engC.hold();
    try {
      const held = post(`${c.url}/v1/chat/completions?host=C`, { model: 'shared', messages: [] });
      await waitFor(() => engC.heldCount === 1, { what: 'C busy' });
      // A signed-or-named forward can only come from a member: act as A from A's address.
      const fromA = new Agent({ localAddress: IP(1) });
      const r = await request(`${c.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-viiwork-node': 'A' },
        body: JSON.stringify({ model: 'shared', messages: [] }),
        dispatcher: fromA,
      });
      const text = await r.body.text();
      assert.equal(r.statusCode, 429, text);
      assert.equal(r.headers['retry-after'], '1');
      engC.releaseAll();
      assert.equal((await held).status, 200);
      await fromA.close();
    } finally {
      engC.hold(false);
    }
  });

  it('a refused forward is retried at once on another host that has room', async () => {
    engB.hold();
    try {
      await waitFor(
        async () => {
          const fleet = await getJson(`${a.url}/v1/fleet/capacity`);
          const h = fleet.models.find((m: any) => m.name === 'shared').hosts.find((x: any) => x.node === 'B');
          return h.free === 1 && h.report_age_ms < 500;
        },
        { what: 'a fresh report of B with a free slot on A' },
      );
      const fillB = post(`${b.url}/v1/chat/completions?host=B`, { model: 'shared', messages: [] });
      await waitFor(() => engB.heldCount === 1, { what: 'B busy' });
      const beforeC = engC.count('/v1/chat/completions');
      const beforeB = engB.count('/v1/chat/completions');
      const r = await post(`${a.url}/v1/chat/completions?prefer=B`, { model: 'shared', messages: [] });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.headers['x-viiwork-node'], 'C');
      assert.equal(engC.count('/v1/chat/completions'), beforeC + 1);
      assert.equal(engB.count('/v1/chat/completions'), beforeB, 'the refusal never reached B’s engine');
      const metrics = await (await request(`${a.url}/metrics`)).body.text();
      assert.match(metrics, /viiwork_forwards_total\{outcome="refused"\} [1-9]/);
      engB.releaseAll();
      await fillB;
    } finally {
      engB.hold(false);
    }
  });

  /** Take B's and C's only slot for `shared` with requests pinned at their own nodes (engines must be holding). */
  async function fillBAndC() {
    const fills = [post(`${b.url}/v1/chat/completions?host=B`, { model: 'shared', messages: [] }), post(`${c.url}/v1/chat/completions?host=C`, { model: 'shared', messages: [] })];
    await waitFor(() => engB.heldCount === 1 && engC.heldCount === 1, { what: 'B and C busy' });
    return fills;
  }

  async function freshViewOfShared(want: (hosts: { node: string; free: number; report_age_ms: number }[]) => boolean, what: string) {
    await waitFor(
      async () => {
        const fleet = await getJson(`${a.url}/v1/fleet/capacity`);
        const hosts = fleet.models.find((m: any) => m.name === 'shared').hosts;
        return hosts.every((h: any) => h.report_age_ms < 500) && want(hosts);
      },
      { timeoutMs: 10_000, what },
    );
  }

  it('with every host refusing, a request never bounces: it waits and ends with 503 Retry-After 2 at the deadline', async () => {
    engB.hold();
    engC.hold();
    try {
      // A's view says both have room (a fresh report), then both fill up behind its back: A's forwards are refused.
      await freshViewOfShared((hosts) => hosts.every((h) => h.free === 1), 'A sees B and C free');
      const fills = await fillBAndC();
      const before = { b: engB.count('/v1/chat/completions'), c: engC.count('/v1/chat/completions') };
      const r = await post(`${a.url}/v1/chat/completions`, { model: 'shared', messages: [] });
      assert.equal(r.status, 503, r.text);
      assert.equal(r.headers['retry-after'], '2');
      assert.equal(JSON.parse(r.text).error.code, 'queue_timeout');
      assert.equal(engB.count('/v1/chat/completions'), before.b, 'B’s engine got nothing more');
      assert.equal(engC.count('/v1/chat/completions'), before.c, 'C’s engine got nothing more');
      engB.releaseAll();
      engC.releaseAll();
      await Promise.all(fills);
    } finally {
      engB.hold(false);
      engC.hold(false);
    }
  });

  it('with every host known to be full, a request waits and ends with 429 Retry-After 2 at the deadline', async () => {
    engB.hold();
    engC.hold();
    try {
      const fills = await fillBAndC();
      await freshViewOfShared((hosts) => hosts.every((h) => h.free === 0), 'A sees B and C full');
      const r = await post(`${a.url}/v1/chat/completions`, { model: 'shared', messages: [] });
      assert.equal(r.status, 429, r.text);
      assert.equal(r.headers['retry-after'], '2');
      engB.releaseAll();
      engC.releaseAll();
      await Promise.all(fills);
    } finally {
      engB.hold(false);
      engC.hold(false);
    }
  });

  it('a member’s poll is told which of the busy slots are its own forwards (your_busy); a client’s and another member’s are not', async () => {
    engB.hold();
    const fromA = new Agent({ localAddress: IP(1) });
    const fromC = new Agent({ localAddress: IP(3) });
    try {
      const sent = post(`${a.url}/v1/chat/completions?host=B`, { model: 'shared', messages: [] });
      await waitFor(() => engB.heldCount === 1, { what: 'A’s forward running on B' });
      const sharedOf = async (dispatcher?: Agent) => {
        const r = await request(`${b.url}/v1/capacity`, dispatcher ? { dispatcher } : {});
        return ((await r.body.json()) as any).models.find((m: any) => m.name === 'shared').targets[0];
      };
      const toA = await sharedOf(fromA);
      assert.equal(toA.busy, 1);
      assert.equal(toA.your_busy, 1, 'A is told the busy slot is its forward');
      assert.equal((await sharedOf(fromC)).your_busy, 0, 'C is told none of it is its own');
      assert.equal((await sharedOf()).your_busy, undefined, 'a client (not at a member’s address) is told nothing of it');
      engB.releaseAll();
      assert.equal((await sent).status, 200);
      const after = await sharedOf(fromA);
      assert.deepEqual([after.busy, after.your_busy], [0, 0]);
    } finally {
      engB.hold(false);
      await fromA.close();
      await fromC.close();
    }
  });

  it('a client cannot pass its request off as a forward in an open mesh (X-Viiwork-Node from a non-member address is 401)', async () => {
    const r = await post(`${c.url}/v1/chat/completions`, { model: 'only-c', messages: [] }, { 'x-viiwork-node': 'A' });
    assert.equal(r.status, 401, r.text);
  });

  it('queues on the entry node while every slot is busy, and serves in FIFO order as slots free', async () => {
    engB.hold();
    engC.hold();
    try {
      const t0 = Date.now();
      const first = [1, 2].map((n) => post(`${a.url}/v1/chat/completions`, { model: 'shared', messages: [], n }));
      await waitFor(() => engB.heldCount + engC.heldCount === 2, { what: 'both hosts busy' });
      const third = post(`${a.url}/v1/chat/completions`, { model: 'shared', messages: [], n: 3 });
      await waitFor(async () => /viiwork_queue_depth\{model="shared",workload="chat"\} 1/.test(await (await request(`${a.url}/metrics`)).body.text()), { what: 'third queued on A' });
      const fourth = post(`${a.url}/v1/chat/completions`, { model: 'shared', messages: [], n: 4 });
      await waitFor(async () => /viiwork_queue_depth\{model="shared",workload="chat"\} 2/.test(await (await request(`${a.url}/metrics`)).body.text()), { what: 'fourth queued on A' });
      // Free one slot at a time and wait until the queue head reaches an engine before freeing the next.
      const arrivedN = () => [...engB.requests, ...engC.requests].filter((r) => r.at >= t0 && (r.json?.n === 3 || r.json?.n === 4)).map((r) => r.json.n);
      for (const expected of [[3], [3, 4]]) {
        if (engB.heldCount > 0) engB.release(1);
        else engC.release(1);
        await waitFor(() => arrivedN().length === expected.length, { timeoutMs: 10_000, what: `request ${expected.at(-1)} dispatched` });
        assert.deepEqual(arrivedN(), expected);
      }
      engB.hold(false);
      engC.hold(false);
      const results = await Promise.all([...first, third, fourth]);
      assert.deepEqual(results.map((r) => r.status), [200, 200, 200, 200]);
      assert.equal(results[2].headers['x-viiwork-route'], 'queued');
      assert.equal(results[3].headers['x-viiwork-route'], 'queued');
    } finally {
      engB.hold(false);
      engC.hold(false);
    }
  });
});
