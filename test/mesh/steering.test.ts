/** Issue 4, acceptance 4–5: sessions, pins and preferences across a real three-node mesh. */
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { startFakeEngine, type FakeEngine } from '../fakes/fake-engine.ts';
import { waitFor } from '../fakes/wait.ts';
import { startMeshNode, stopAll, waitConverged, waitModelOn, postJson as post, type MeshNode } from '../helpers/mesh.ts';

const IP = (n: number) => `127.0.21.${n}`;

const chat = { model: 'm', messages: [{ role: 'user', content: 'hi' }] };

describe('sessions, pins and preferences', () => {
  const engines: Record<string, FakeEngine> = {};
  const nodes: MeshNode[] = [];
  let a: MeshNode, b: MeshNode, c: MeshNode;
  before(async () => {
    for (const name of ['A', 'B', 'C']) engines[name] = await startFakeEngine({ name: `eng${name}`, outputTokens: 2 });
    a = await startMeshNode({ name: 'A', ip: IP(1), models: [{ name: 'm', engine: 'openai', url: engines.A.url, parallel: 2 }] });
    b = await startMeshNode({ name: 'B', ip: IP(2), seeds: [a.gossip], models: [{ name: 'm', engine: 'openai', url: engines.B.url, parallel: 2 }] });
    c = await startMeshNode({ name: 'C', ip: IP(3), seeds: [a.gossip], models: [{ name: 'm', engine: 'openai', url: engines.C.url, parallel: 2 }] });
    nodes.push(a, b, c);
    await waitConverged(nodes);
    for (const n of nodes) await waitModelOn(n, 'm', ['A', 'B', 'C']);
  });
  after(async () => {
    await stopAll(nodes);
    for (const e of Object.values(engines)) await e.close();
  });

  it('keeps each of 50 session keys on one host from every entry node, spread over several hosts', async () => {
    const home = new Map<string, string>();
    for (let k = 0; k < 50; k++) {
      const key = `sess-${k}`;
      const hosts = new Set<string>();
      for (const entry of nodes) {
        const r = await post(`${entry.url}/v1/chat/completions`, chat, { 'x-session-id': key });
        assert.equal(r.status, 200);
        assert.equal(r.headers['x-viiwork-route'], 'session');
        hosts.add(String(r.headers['x-viiwork-node']));
      }
      assert.equal(hosts.size, 1, `${key} ran on ${[...hosts]}`);
      home.set(key, [...hosts][0]);
    }
    assert.ok(new Set(home.values()).size >= 2, `all keys on ${[...new Set(home.values())]}`);
  });

  it('without session headers, the turns of each of 20 conversations reach one host from every entry node (prefix affinity)', async () => {
    const home = new Map<number, string>();
    for (let k = 0; k < 20; k++) {
      const system = { role: 'system', content: `You are assistant number ${k}.` };
      const turns = [
        [system, { role: 'user', content: `first question of ${k}` }],
        [system, { role: 'user', content: `first question of ${k}` }, { role: 'assistant', content: 'an answer' }, { role: 'user', content: 'and then?' }],
      ];
      const hosts = new Set<string>();
      for (const entry of nodes) {
        for (const messages of turns) {
          const r = await post(`${entry.url}/v1/chat/completions`, { model: 'm', messages });
          assert.equal(r.status, 200);
          assert.equal(r.headers['x-viiwork-route'], 'prefix');
          hosts.add(String(r.headers['x-viiwork-node']));
        }
      }
      assert.equal(hosts.size, 1, `conversation ${k} ran on ${[...hosts]}`);
      home.set(k, [...hosts][0]);
    }
    assert.ok(new Set(home.values()).size >= 2, `every conversation on ${[...new Set(home.values())]}`);
  });

  it('X-Session-Affinity wins over X-Session-Id', async () => {
    const viaAffinity = await post(`${a.url}/v1/chat/completions`, chat, { 'x-session-affinity': 'aff-1' });
    for (let i = 0; i < 5; i++) {
      const r = await post(`${b.url}/v1/chat/completions`, chat, { 'x-session-affinity': 'aff-1', 'x-session-id': `other-${i}` });
      assert.equal(r.headers['x-viiwork-node'], viaAffinity.headers['x-viiwork-node']);
    }
  });

  it('moves a session off its full host and brings it back when the host has room', async () => {
    const key = 'sticky';
    const first = await post(`${a.url}/v1/chat/completions`, chat, { 'x-session-id': key });
    const home = String(first.headers['x-viiwork-node']);
    const eng = engines[home];
    const homeNode = nodes.find((n) => n.name === home)!;
    eng.hold();
    const fill = [1, 2].map(() => post(`${homeNode.url}/v1/chat/completions?host=${home}`, chat));
    await waitFor(() => eng.heldCount === 2, { what: 'session host full' });
    await waitFor(
      async () => {
        const r = await post(`${a.url}/v1/chat/completions`, chat, { 'x-session-id': key });
        return r.status === 200 && r.headers['x-viiwork-node'] !== home;
      },
      { timeoutMs: 10_000, what: 'session runs elsewhere while its host is full' },
    );
    eng.hold(false);
    await Promise.all(fill);
    await waitFor(
      async () => (await post(`${a.url}/v1/chat/completions`, chat, { 'x-session-id': key })).headers['x-viiwork-node'] === home,
      { timeoutMs: 10_000, what: 'session back on its host' },
    );
  });

  it('?host=C runs on C, and waits for C when it is full', async () => {
    for (const entry of nodes) {
      const r = await post(`${entry.url}/v1/chat/completions?host=C`, chat);
      assert.equal(r.headers['x-viiwork-node'], 'C');
      assert.equal(r.headers['x-viiwork-route'], 'pinned');
    }
    engines.C.hold();
    const fill = [1, 2].map(() => post(`${c.url}/v1/chat/completions?host=C`, chat));
    await waitFor(() => engines.C.heldCount === 2, { what: 'C full' });
    const pinned = post(`${a.url}/v1/chat/completions?host=C`, chat);
    await waitFor(async () => /viiwork_queue_depth\{model="m",workload="chat"\} 1/.test(await (await request(`${a.url}/metrics`)).body.text()), { what: 'pinned request waiting on A' });
    engines.C.hold(false);
    const r = await pinned;
    await Promise.all(fill);
    assert.equal(r.status, 200);
    assert.equal(r.headers['x-viiwork-node'], 'C');
    assert.equal(r.headers['x-viiwork-route'], 'queued');
  });

  it('?host=nosuch is 404; an address in ?host or ?prefer is 400 and never dialled', async () => {
    let connections = 0;
    const listener = net.createServer((s) => {
      connections++;
      s.destroy();
    });
    await new Promise<void>((r) => listener.listen(19499, '127.0.0.1', () => r()));
    try {
      assert.equal((await post(`${a.url}/v1/chat/completions?host=nosuch`, chat)).status, 404);
      assert.equal((await post(`${a.url}/v1/chat/completions?host=127.0.0.1:19499`, chat)).status, 400);
      assert.equal((await post(`${a.url}/v1/chat/completions?prefer=http://127.0.0.1:19499/`, chat)).status, 400);
      assert.equal((await post(`${a.url}/v1/chat/completions`, chat, { 'x-viiwork-prefer': '127.0.0.1:19499' })).status, 400);
      assert.equal(connections, 0);
    } finally {
      listener.close();
    }
  });

  it('?prefer=B,C goes to B when B is free, else C, else anywhere; unknown names are passed over', async () => {
    const r1 = await post(`${a.url}/v1/chat/completions?prefer=nosuch,B,C`, chat);
    assert.equal(r1.headers['x-viiwork-node'], 'B');
    assert.equal(r1.headers['x-viiwork-route'], 'preferred');
    const viaHeader = await post(`${c.url}/v1/chat/completions`, chat, { 'x-viiwork-prefer': 'B' });
    assert.equal(viaHeader.headers['x-viiwork-node'], 'B');
    engines.B.hold();
    const fillB = [1, 2].map(() => post(`${b.url}/v1/chat/completions?host=B`, chat));
    await waitFor(() => engines.B.heldCount === 2, { what: 'B full' });
    await waitFor(async () => (await post(`${a.url}/v1/chat/completions?prefer=B,C`, chat)).headers['x-viiwork-node'] === 'C', { timeoutMs: 10_000, what: 'C when B is full' });
    engines.C.hold();
    const fillC = [1, 2].map(() => post(`${c.url}/v1/chat/completions?host=C`, chat));
    await waitFor(() => engines.C.heldCount === 2, { what: 'C full' });
    await waitFor(
      async () => {
        const r = await post(`${a.url}/v1/chat/completions?prefer=B,C`, chat);
        return r.status === 200 && r.headers['x-viiwork-node'] === 'A';
      },
      { timeoutMs: 10_000, what: 'anywhere when B and C are full' },
    );
    engines.B.hold(false);
    engines.C.hold(false);
    await Promise.all([...fillB, ...fillC]);
  });
});
