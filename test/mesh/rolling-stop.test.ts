/**
 * A rolling restart: one of two executors is stopped (SIGTERM) while clients
 * keep sending through a gateway. The stopping node leaves the mesh, finishes
 * what it runs and closes; a forward that reaches it meanwhile is refused with
 * a mark (SPEC section 9, step 9: retried on another route), never answered
 * "stopping" to the client. Every request ends in an answer.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Agent, request } from 'undici';
import { startFakeEngine, type FakeEngine } from '../fakes/fake-engine.ts';
import { startMeshNode, stopAll, waitConverged, waitModelOn, type MeshNode } from '../helpers/mesh.ts';

const IP = (n: number) => `127.0.71.${n}`;

describe('stopping an executor while traffic flows through a gateway', () => {
  let engB: FakeEngine, engC: FakeEngine;
  let g: MeshNode, b: MeshNode, c: MeshNode;
  const client = new Agent({ connections: 64 });

  before(async () => {
    engB = await startFakeEngine({ name: 'b', outputTokens: 4, chunkDelayMs: 2 });
    engC = await startFakeEngine({ name: 'c', outputTokens: 4, chunkDelayMs: 2 });
    b = await startMeshNode({ name: 'B', ip: IP(2), models: [{ name: 'm', engine: 'openai', url: engB.url, parallel: 4 }] });
    c = await startMeshNode({ name: 'C', ip: IP(3), seeds: [b.gossip], models: [{ name: 'm', engine: 'openai', url: engC.url, parallel: 4 }] });
    g = await startMeshNode({ name: 'G', ip: IP(1), seeds: [b.gossip], routing: { queue_timeout: '20s' } });
    await waitConverged([g, b, c]);
    await waitModelOn(g, 'm', ['B', 'C']);
  });
  after(async () => {
    await stopAll([g, b, c]);
    await client.close();
    await engB?.close();
    await engC?.close();
  });

  it('every request is answered 200, before, during and after the stop, and C takes them all at the end', async () => {
    const statuses: Record<string, number> = {};
    const failures: string[] = [];
    const executors: Record<string, number> = {};
    let stopped = false;
    let servedAfterStop = 0;
    let sent = 0;
    const once = async (stream: boolean) => {
      // A prompt of its own: one shared prompt would rightly stay on the executor that holds it cached.
      const content = `hello ${sent++}`;
      try {
        const r = await request(`${g.url}/v1/chat/completions`, {
          method: 'POST',
          dispatcher: client,
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'm', stream, messages: [{ role: 'user', content }] }),
        });
        const text = await r.body.text();
        statuses[r.statusCode] = (statuses[r.statusCode] ?? 0) + 1;
        const ex = String(r.headers['x-viiwork-node']);
        executors[ex] = (executors[ex] ?? 0) + 1;
        if (r.statusCode !== 200 || (stream && (!text.includes('data: [DONE]') || text.includes('event: error')))) failures.push(`${r.statusCode} from ${ex}: ${text.slice(0, 300)}`);
        else if (stopped) servedAfterStop++;
      } catch (err) {
        failures.push(`no answer: ${(err as Error).message}`);
      }
    };
    // Eight clients (more than one executor's four slots) in a loop until B has exited and C has answered 40 more.
    let done = false;
    const workers = Array.from({ length: 8 }, async (_, k) => {
      while (!done) await once(k % 2 === 0);
    });
    try {
      // Let traffic reach both executors, then stop B under it.
      const t0 = Date.now();
      while ((executors.B ?? 0) < 20 || (executors.C ?? 0) < 20) {
        if (Date.now() - t0 > 30_000) throw new Error(`traffic did not reach both executors: ${JSON.stringify(executors)}`);
        await new Promise((r) => setTimeout(r, 20));
      }
      await b.stop();
      stopped = true;
      const t1 = Date.now();
      while (servedAfterStop < 40) {
        if (Date.now() - t1 > 30_000) break;
        await new Promise((r) => setTimeout(r, 20));
      }
    } finally {
      // The clients stop on every path: a loop left running would spin the test process for ever.
      done = true;
      await Promise.all(workers);
    }
    assert.deepEqual(failures, [], `statuses ${JSON.stringify(statuses)}, executors ${JSON.stringify(executors)}`);
    assert.ok(servedAfterStop >= 40, `only ${servedAfterStop} answered after B stopped`);
  });
});
