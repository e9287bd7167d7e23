/**
 * A node that crashes and is started again at once (systemd's
 * Restart=on-failure: same name, same address, same state dir) rejoins
 * while the mesh may still count its old self alive: it is the same member
 * coming back, not a second node with its name, so it must not exit as a
 * duplicate, and requests through another node reach it again.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startFakeEngine, type FakeEngine } from '../fakes/fake-engine.ts';
import { waitFor } from '../fakes/wait.ts';
import { getJson, startMeshNode, stopAll, waitConverged, waitModelOn, type MeshNode } from '../helpers/mesh.ts';

const IP = (n: number) => `127.0.72.${n}`;

describe('a node killed and started again at once', () => {
  let eng: FakeEngine;
  let g: MeshNode, b: MeshNode | undefined, b2: MeshNode | undefined;

  before(async () => {
    eng = await startFakeEngine({ name: 'b', outputTokens: 3 });
    g = await startMeshNode({ name: 'G', ip: IP(1) });
    b = await startMeshNode({ name: 'B', ip: IP(2), seeds: [g.gossip], models: [{ name: 'm', engine: 'openai', url: eng.url, parallel: 2 }] });
    await waitConverged([g, b]);
    await waitModelOn(g, 'm', ['B']);
  });
  after(async () => {
    await stopAll([g, b, b2]);
    await eng?.close();
  });

  it('rejoins as itself (no duplicate-name exit) and serves requests that enter another node', async () => {
    b!.proc.kill('SIGKILL');
    await b!.exited;
    // The mesh has not noticed yet: G still counts B alive.
    const seen = await getJson<{ members: { name: string; state: string }[] }>(`${g.url}/v1/mesh`);
    assert.equal(seen.members.find((m) => m.name === 'B')?.state, 'alive');
    b2 = await startMeshNode({ name: 'B', ip: IP(2), seeds: [g.gossip], stateDir: b!.stateDir, models: [{ name: 'm', engine: 'openai', url: eng.url, parallel: 2 }] });
    await waitModelOn(g, 'm', ['B']);
    await waitFor(
      async () => {
        const r = await fetch(`${g.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }) });
        await r.text();
        return r.status === 200 && r.headers.get('x-viiwork-node') === 'B';
      },
      { timeoutMs: 20_000, what: 'a request through G answered by the restarted B' },
    );
    // Still up a while later: a duplicate-name verdict would have ended it by now.
    const code = await Promise.race([b2.exited, new Promise((r) => setTimeout(() => r('running'), 3000))]);
    assert.equal(code, 'running', b2.logs().slice(-2000));
    assert.doesNotMatch(b2.logs(), /another live node is named/);
  });
});
