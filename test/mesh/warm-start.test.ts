/**
 * Issue 10, acceptance 5: a warm start. A node started into a running mesh
 * answers /health 503 `starting` until it has joined and heard from every
 * member; requests for remote models sent from the moment it accepts
 * connections get 200, never a wrong 404. A request for a model whose only
 * engine is loading waits for it and is answered once it is up.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { startFakeEngine, type FakeEngine } from '../fakes/fake-engine.ts';
import { waitFor } from '../fakes/wait.ts';
import { getJson, startMeshNode, stopAll, waitModelOn, type MeshNode } from '../helpers/mesh.ts';

const IP = (n: number) => `127.0.30.${n}`;

async function chat(url: string, model: string) {
  const r = await request(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] }) });
  return { status: r.statusCode, text: await r.body.text(), node: r.headers['x-viiwork-node'] };
}

describe('a warm start', () => {
  let engine: FakeEngine;
  let slowLoader: FakeEngine;
  let b: MeshNode, a: MeshNode | undefined;
  before(async () => {
    engine = await startFakeEngine({ name: 'remote', outputTokens: 2 });
    b = await startMeshNode({ name: 'B', ip: IP(2), models: [{ name: 'remote-model', engine: 'openai', url: engine.url, parallel: 4 }] });
  });
  after(async () => {
    await stopAll([a, b]);
    await engine?.close();
    await slowLoader?.close();
  });

  it('a node joining a running mesh answers requests for remote models from its first accepted connection, never 404', async () => {
    a = await startMeshNode({ name: 'A', ip: IP(1), seeds: [`${IP(2)}:7946`] }, { waitHealthy: false });
    // Fire requests as soon as the API accepts connections, well before /health says 200.
    const answers: Promise<{ status: number; text: string }>[] = [];
    let sawStarting = false;
    await waitFor(
      async () => {
        try {
          const h = await request(`${a!.url}/health`);
          const doc = (await h.body.json()) as { status: string };
          if (h.statusCode === 503) {
            assert.equal(doc.status, 'starting');
            sawStarting = true;
          }
          // At most 32 while it starts: a slow start on a loaded machine would otherwise pile up more than the queue holds (64).
          if (answers.length < 32) answers.push(chat(a!.url, 'remote-model'));
          return h.statusCode === 200;
        } catch {
          return false; // not listening yet
        }
      },
      { what: 'A healthy', timeoutMs: 30_000, intervalMs: 20 },
    );
    for (let i = 0; i < 5; i++) answers.push(chat(a.url, 'remote-model'));
    const results = await Promise.all(answers);
    assert.ok(results.length >= 6);
    for (const r of results) assert.equal(r.status, 200, r.text);
    if (!sawStarting) console.log('note: A was ready before its first /health answer; only the requests after it were checked');
  });

  it('a request sent while the only engine of its model is loading is answered once the engine is up', async () => {
    // The engine stays loading until the test says so, however long the node takes to start.
    slowLoader = await startFakeEngine({ name: 'loader', outputTokens: 2 });
    slowLoader.setLoading(true);
    const c = await startMeshNode({ name: 'C', ip: IP(3), seeds: [`${IP(2)}:7946`], routing: { queue_timeout: '20s' }, models: [{ name: 'loading-model', engine: 'openai', url: slowLoader.url, parallel: 1 }] });
    try {
      const answer = chat(c.url, 'loading-model');
      await waitFor(async () => (await getJson(`${c.url}/v1/capacity`)).models.find((m: { name: string }) => m.name === 'loading-model')?.queued === 1, {
        what: 'the request waiting in the queue while the engine loads',
        timeoutMs: 10_000,
      });
      slowLoader.setLoading(false);
      const r = await answer;
      assert.equal(r.status, 200, r.text);
      // Through another node too, from the loading report onwards.
      await waitModelOn(b, 'loading-model', ['C']);
      assert.equal((await chat(b.url, 'loading-model')).status, 200);
    } finally {
      await c.stop();
    }
  });
});
