/**
 * A rolling restart (SPEC section 13, issue 43 item 2): every serving node of
 * a 3-node mesh is stopped with SIGTERM (a drain) and started again, one
 * after another, while clients keep sending through a gateway. No request is
 * lost: every one ends 200 (a stream with its [DONE]), every node exits 0 after
 * its drain, and each restarted node takes work again.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Agent, request } from 'undici';
import { waitFor } from '../fakes/wait.ts';
import { startMeshNode, stopAll, waitConverged, waitModelOn, type MeshNode, type MeshNodeSpec } from '../helpers/mesh.ts';

const IP = (n: number) => `127.0.201.${n}`;
const SIM = { name: 'm', engine: 'sim', parallel: 2, sim: { ttft_ms: 20, prefill_ms_per_1k: 5, tokens_per_s: 200, output_tokens: 8 } };

describe('a rolling restart of a 3-node mesh under steady load', () => {
  const specs: MeshNodeSpec[] = ['A', 'B', 'C'].map((name, i) => ({ name, ip: IP(2 + i), models: [SIM] }));
  let g: MeshNode;
  const nodes: MeshNode[] = [];
  const client = new Agent({ connections: 64 });

  before(async () => {
    g = await startMeshNode({ name: 'G', ip: IP(1), routing: { queue_timeout: '30s' } });
    for (const s of specs) nodes.push(await startMeshNode({ ...s, seeds: [g.gossip] }));
    await waitConverged([g, ...nodes]);
    await waitModelOn(g, 'm', ['A', 'B', 'C']);
  });
  after(async () => {
    await stopAll([g, ...nodes]);
    await client.close();
  });

  it('every request ends 200 while A, B and C are drained and started again in turn', async () => {
    const failures: string[] = [];
    const executors: Record<string, number> = {};
    let answered = 0;
    let sent = 0;
    const once = async (stream: boolean) => {
      const content = `turn ${sent++}: ${'more '.repeat(sent % 7)}`;
      try {
        const r = await request(`${g.url}/v1/chat/completions`, {
          method: 'POST',
          dispatcher: client,
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'm', stream, messages: [{ role: 'user', content }] }),
        });
        const text = await r.body.text();
        const ex = String(r.headers['x-viiwork-node']);
        executors[ex] = (executors[ex] ?? 0) + 1;
        if (r.statusCode !== 200 || (stream && (!text.includes('data: [DONE]') || text.includes('event: error')))) failures.push(`${r.statusCode} from ${ex}: ${text.slice(0, 300)}`);
        else answered++;
      } catch (err) {
        failures.push(`no answer: ${(err as Error).message}`);
      }
    };
    let done = false;
    const workers = Array.from({ length: 8 }, async (_, k) => {
      while (!done) await once(k % 2 === 0);
    });
    try {
      await waitFor(() => ['A', 'B', 'C'].every((n) => (executors[n] ?? 0) >= 10), { timeoutMs: 30_000, what: 'traffic on every node' });
      for (let i = 0; i < nodes.length; i++) {
        const old = nodes[i];
        await old.stop();
        assert.equal(await old.exited, 0, `${old.name} drained and exited 0:\n${old.logs()}`);
        assert.match(old.logs(), /draining \(SIGTERM\)/);
        const before = executors[old.name] ?? 0;
        nodes[i] = await startMeshNode({ ...specs[i], stateDir: old.stateDir, seeds: [g.gossip] });
        await waitModelOn(g, 'm', ['A', 'B', 'C'], 30_000);
        await waitFor(() => (executors[old.name] ?? 0) >= before + 10, { timeoutMs: 30_000, what: `${old.name} working again after its restart` });
      }
      const at = answered;
      await waitFor(() => answered >= at + 20, { timeoutMs: 30_000, what: 'answers after the last restart' });
    } finally {
      done = true;
      await Promise.all(workers);
    }
    assert.deepEqual(failures, [], `executors ${JSON.stringify(executors)}`);
  });
});
