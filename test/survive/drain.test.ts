/**
 * Drain (SPEC section 13, issue 43 item 2) with real processes: `viiwork
 * drain` and SIGTERM make a node say `draining` in its report, route what
 * arrives at it to the other members (or answer 503 with Retry-After when
 * nobody else can take it), let what it runs finish, then leave the mesh and
 * exit 0. Engines that hold their answers until told make "while a request
 * runs" a state the test controls, not a race.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { startFakeEngine, type FakeEngine } from '../fakes/fake-engine.ts';
import { waitFor } from '../fakes/wait.ts';
import { getJson, postJson, startMeshNode, stopAll, waitConverged, waitModelOn, type MeshNode } from '../helpers/mesh.ts';
import { openPost } from '../helpers/http.ts';

const IP = (n: number) => `127.0.200.${n}`;
const BIN = path.resolve('bin/viiwork.js');

/** `viiwork drain` as an operator runs it: its exit code and output. */
function cli(args: string[]): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [BIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (out += d));
    p.on('exit', (code) => resolve({ code, out }));
  });
}

const chat = (content: string) => ({ model: 'm', max_tokens: 4, messages: [{ role: 'user', content }] });

describe('viiwork drain: a node with a request running', () => {
  let engA: FakeEngine, engB: FakeEngine;
  let a: MeshNode, b: MeshNode;

  before(async () => {
    engA = await startFakeEngine({ name: 'a', outputTokens: 4 });
    engB = await startFakeEngine({ name: 'b', outputTokens: 4 });
    a = await startMeshNode({ name: 'A', ip: IP(1), models: [{ name: 'm', engine: 'openai', url: engA.url, parallel: 2 }] });
    // B polls A's report only every 5 s (and holds it fresh for 20), so right after the drain B still places work on A.
    b = await startMeshNode({
      name: 'B',
      ip: IP(2),
      seeds: [a.gossip],
      models: [{ name: 'm', engine: 'openai', url: engB.url, parallel: 2 }],
      mesh: { capacity_poll: '5s' },
      routing: { stale_after: '20s' },
    });
    await waitConverged([a, b]);
    await waitModelOn(a, 'm', ['A', 'B']);
    await waitModelOn(b, 'm', ['A', 'B']);
  });
  after(async () => {
    await stopAll([a, b]);
    await engA?.close();
    await engB?.close();
  });

  it('reports draining, sends what arrives to the other member, finishes the running stream, then leaves and exits 0', async () => {
    engA.hold();
    // Its answer comes only once the engine is let go: the client waits on it meanwhile.
    const running = openPost(`${a.url}/v1/chat/completions?host=A`, {}, { ...chat('the long one'), stream: true });
    await waitFor(() => engA.heldCount >= 1, { timeoutMs: 10_000, what: "A's engine holding the request" });

    const drained = await cli(['drain', '--url', a.url, '--no-wait']);
    assert.equal(drained.code, 0, drained.out);
    assert.match(drained.out, /A: draining/);

    const report = await getJson(`${a.url}/v1/capacity`);
    assert.equal(report.draining, true);
    const health = await request(`${a.url}/health`);
    assert.equal(health.statusCode, 503, 'a load balancer takes a draining node out of rotation');
    assert.equal(((await health.body.json()) as { status: string }).status, 'draining');
    // A request B places on A by its report from before the drain is refused there as draining, never run: B answers
    // the client 503 `draining` once its next poll of A says so.
    const early = await postJson(`${b.url}/v1/chat/completions?host=A`, chat('placed on a report from before the drain'));
    assert.equal(early.status, 503, early.text);
    assert.equal(JSON.parse(early.text).error.code, 'draining');
    assert.equal(engA.heldCount, 1, 'A ran nothing new while draining');
    // B's view: A is draining, so B's own clients go to B.
    await waitFor(() => fleetDraining(b, 'A'), { timeoutMs: 20_000, what: 'B sees A draining' });

    // The operator's view from B: `viiwork status` names A draining.
    await waitFor(async () => (await cli(['status', '--url', b.url])).out.split('\n').some((l) => /^m\s+A\s.*draining/.test(l)), { timeoutMs: 20_000, what: 'viiwork status on B shows A draining' });
    // A client of A (still an entry) is answered by B.
    for (let i = 0; i < 4; i++) {
      const r = await postJson(`${a.url}/v1/chat/completions`, chat(`while A drains ${i}`));
      assert.equal(r.status, 200, r.text);
      assert.equal(r.headers['x-viiwork-node'], 'B');
      const viaB = await postJson(`${b.url}/v1/chat/completions`, chat(`at B while A drains ${i}`));
      assert.equal(viaB.status, 200, viaB.text);
      assert.equal(viaB.headers['x-viiwork-node'], 'B');
    }
    assert.equal(engA.heldCount, 1, 'A took no new work while draining');

    // The running stream finishes whole; then A goes.
    engA.hold(false);
    engA.releaseAll();
    const answer = await running;
    assert.equal(answer.status, 200);
    const text = await answer.body.text();
    assert.match(text, /data: \[DONE\]/);
    assert.equal(await a.exited, 0, a.logs());
    await waitFor(async () => (await getJson(`${b.url}/v1/mesh`)).members.some((m: { name: string; state: string }) => m.name === 'A' && m.state === 'left'), {
      timeoutMs: 10_000,
      what: 'B sees A left',
    });
    assert.match(a.logs(), /every request here has ended/);
  });
});

/** Does `node`'s fleet view say `host` is draining? (Read from /v1/capacity of the host, as the members poll it.) */
async function fleetDraining(node: MeshNode, host: string): Promise<boolean> {
  const r = await postJson(`${node.url}/v1/chat/completions?host=${host}`, chat('pinned to a draining host'));
  return r.status === 503 && JSON.parse(r.text).error.code === 'draining';
}

describe('SIGTERM: the only host of a model drains', () => {
  let eng: FakeEngine;
  let a: MeshNode;

  before(async () => {
    eng = await startFakeEngine({ name: 'solo', outputTokens: 4 });
    a = await startMeshNode({ name: 'S', ip: IP(11), models: [{ name: 'm', engine: 'openai', url: eng.url, parallel: 1 }], node: { drain_timeout: '2m' }, routing: { queue_timeout: '2m' } });
  });
  after(async () => {
    await stopAll([a]);
    await eng?.close();
  });

  it('answers new requests 503 `draining` with Retry-After, finishes the one it runs and the one it queued, and exits 0', async () => {
    eng.hold();
    const running = openPost(`${a.url}/v1/chat/completions`, {}, chat('the long one'));
    await waitFor(() => eng.heldCount >= 1, { timeoutMs: 10_000, what: 'the engine holding the request' });
    // Its one slot is taken: the next request waits in S's queue, from before the drain.
    const queued = openPost(`${a.url}/v1/chat/completions`, {}, chat('the queued one'));
    await waitFor(async () => (await getJson(`${a.url}/v1/capacity`)).models[0].queued >= 1, { timeoutMs: 10_000, what: 'a request queued at S' });
    a.proc.kill('SIGTERM');
    await waitFor(async () => (await getJson(`${a.url}/v1/capacity`)).draining === true, { timeoutMs: 10_000, what: 'S draining' });
    const refused = await postJson(`${a.url}/v1/chat/completions`, chat('too late'));
    assert.equal(refused.status, 503, refused.text);
    assert.equal(JSON.parse(refused.text).error.code, 'draining');
    assert.ok(Number(refused.headers['retry-after']) > 0, 'Retry-After tells the client when to come back');
    eng.hold(false);
    eng.releaseAll();
    for (const r of [running, queued]) {
      const answer = await r;
      assert.equal(answer.status, 200);
      const body = JSON.parse(await answer.body.text());
      assert.ok(body.choices[0].message.content.length > 0);
    }
    assert.equal(await a.exited, 0, a.logs());
  });
});
