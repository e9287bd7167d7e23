/**
 * Issue 4, acceptance 6–9: performance routing end to end, a frozen member
 * stops getting work, forged forwards in a secured mesh, aliases across
 * nodes (restart, rm).
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { waitFor } from '../fakes/wait.ts';
import { getJson, startMeshNode, stopAll, waitConverged, waitModelOn, postJson as post, type MeshNode } from '../helpers/mesh.ts';

const IP = (n: number) => `127.0.22.${n}`;

const chat = (model: string, content = 'hi') => ({ model, messages: [{ role: 'user', content }] });

async function warmScores(node: MeshNode, model: string, n = 12) {
  for (let i = 0; i < n; i++) {
    const r = await post(`${node.url}/v1/chat/completions?host=${node.name}`, { ...chat(model, i % 2 ? 'x'.repeat(3000) : 'short'), max_tokens: 1 });
    assert.equal(r.status, 200, r.text);
  }
}

describe('performance routing end to end', () => {
  let fast: MeshNode, slow: MeshNode, twin: MeshNode;
  before(async () => {
    const sim = (ttft: number, rate: number) => ({ ttft_ms: ttft, prefill_ms_per_1k: rate, tokens_per_s: 2000, output_tokens: 1 });
    // The rules for requests without any affinity: prefix affinity off, so a shared prompt does not make a session.
    const routing = { prefix_affinity: false };
    fast = await startMeshNode({ name: 'fast', ip: IP(1), routing, models: [{ name: 'm', engine: 'sim', parallel: 4, sim: sim(20, 10) }, { name: 'p', engine: 'sim', parallel: 4, sim: sim(30, 10) }] });
    slow = await startMeshNode({ name: 'slow', ip: IP(2), routing, seeds: [fast.gossip], models: [{ name: 'm', engine: 'sim', parallel: 4, sim: sim(120, 60) }] });
    twin = await startMeshNode({ name: 'twin', ip: IP(3), routing, seeds: [fast.gossip], models: [{ name: 'p', engine: 'sim', parallel: 4, sim: sim(32, 10) }] });
    await waitConverged([fast, slow, twin]);
    await warmScores(fast, 'm');
    await warmScores(slow, 'm');
    await warmScores(fast, 'p');
    await warmScores(twin, 'p');
    await waitFor(
      async () => {
        const f = await getJson(`${slow.url}/v1/fleet/capacity`);
        return f.models.find((m: any) => m.name === 'm')?.hosts.length === 2;
      },
      { what: 'both hosts of m seen from slow' },
    );
    // Scores travel in reports: wait until the slow node has the fast one's.
    await waitFor(
      async () => {
        const cap = await getJson(`${fast.url}/v1/capacity`);
        return cap.models.every((m: any) => m.perf_samples >= 12);
      },
      { what: 'scores measured' },
    );
    await new Promise((r) => setTimeout(r, 0));
  });
  after(() => stopAll([fast, slow, twin]));

  it('sends every request entering the slow host to the fast one while it has room', async () => {
    await waitFor(async () => (await post(`${slow.url}/v1/chat/completions`, chat('m'))).headers['x-viiwork-node'] === 'fast', { timeoutMs: 10_000, what: 'scores propagated' });
    for (let i = 0; i < 20; i++) {
      const r = await post(`${slow.url}/v1/chat/completions`, chat('m'));
      assert.equal(r.headers['x-viiwork-node'], 'fast');
      assert.equal(r.headers['x-viiwork-route'], 'scored');
    }
  });

  it('keeps requests local when two hosts are within 1.25× of each other', async () => {
    await waitModelOn(twin, 'p', ['fast', 'twin']);
    for (const entry of [fast, twin]) {
      for (let i = 0; i < 10; i++) {
        const r = await post(`${entry.url}/v1/chat/completions`, chat('p'));
        assert.equal(r.headers['x-viiwork-node'], entry.name);
        assert.equal(r.headers['x-viiwork-route'], 'local');
      }
    }
  });
});

describe('a frozen member', () => {
  let a: MeshNode, b: MeshNode;
  before(async () => {
    const sim = { ttft_ms: 1, prefill_ms_per_1k: 1, tokens_per_s: 2000, output_tokens: 1 };
    a = await startMeshNode({ name: 'A', ip: IP(11), routing: { stale_after: '1s' }, models: [{ name: 'f', engine: 'sim', parallel: 2, sim }] });
    b = await startMeshNode({ name: 'B', ip: IP(12), seeds: [a.gossip], models: [{ name: 'f', engine: 'sim', parallel: 2, sim }, { name: 'fb', engine: 'sim', parallel: 2, sim }] });
    await waitConverged([a, b]);
    await waitModelOn(a, 'f', ['A', 'B']);
  });
  after(() => stopAll([a, b]));

  it('stops getting new requests once its report is stale, stays listed, and takes work again after SIGCONT', async () => {
    assert.equal((await post(`${a.url}/v1/chat/completions?prefer=B`, chat('f'))).headers['x-viiwork-node'], 'B');
    b.proc.kill('SIGSTOP');
    try {
      await waitFor(async () => (await post(`${a.url}/v1/chat/completions?prefer=B`, chat('f'))).headers['x-viiwork-node'] === 'A', {
        timeoutMs: 3000,
        what: 'A stops sending to the frozen B (stale_after 1 s + 2 s)',
      });
      for (let i = 0; i < 5; i++) assert.equal((await post(`${a.url}/v1/chat/completions?prefer=B`, chat('f'))).headers['x-viiwork-node'], 'A');
      const models = await getJson(`${a.url}/v1/models`);
      assert.deepEqual(models.data.map((m: any) => m.id), ['f', 'fb']);
    } finally {
      b.proc.kill('SIGCONT');
    }
    await waitFor(async () => (await post(`${a.url}/v1/chat/completions?prefer=B`, chat('f'))).headers['x-viiwork-node'] === 'B', { timeoutMs: 10_000, what: 'B takes work again' });
  });
});

describe('a secured mesh', () => {
  const secret = crypto.randomBytes(32).toString('base64');
  let a: MeshNode, b: MeshNode;
  before(async () => {
    const sim = { ttft_ms: 1, prefill_ms_per_1k: 1, tokens_per_s: 2000, output_tokens: 1 };
    a = await startMeshNode({ name: 'A', ip: IP(21), env: { VIIWORK_MESH_SECRET: secret }, models: [{ name: 's', engine: 'sim', parallel: 2, sim }] });
    b = await startMeshNode({ name: 'B', ip: IP(22), env: { VIIWORK_MESH_SECRET: secret }, seeds: [a.gossip], models: [{ name: 'only-b', engine: 'sim', parallel: 2, sim }] });
    await waitConverged([a, b]);
    await waitModelOn(a, 'only-b', ['B']);
    await waitModelOn(b, 's', ['A']);
  });
  after(() => stopAll([a, b]));

  it('forwards signed requests between members', async () => {
    const r = await post(`${a.url}/v1/chat/completions`, chat('only-b'));
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers['x-viiwork-node'], 'B');
  });

  it('answers forged, expired, replayed and partial X-Viiwork-* headers with 401, and counts them', async () => {
    const now = Date.now();
    const nonce = crypto.randomBytes(16).toString('hex');
    const cases: Record<string, string>[] = [
      { 'x-viiwork-node': 'A' },
      { 'x-viiwork-node': 'A', 'x-viiwork-ts': String(now), 'x-viiwork-nonce': nonce, 'x-viiwork-auth': `v1=${'0'.repeat(64)}` },
      { 'x-viiwork-node': 'A', 'x-viiwork-ts': String(now - 300_000), 'x-viiwork-nonce': nonce, 'x-viiwork-auth': `v1=${'1'.repeat(64)}` },
      { 'x-viiwork-auth': `v1=${'2'.repeat(64)}` },
      { 'x-viiwork-ts': String(now), 'x-viiwork-nonce': nonce },
    ];
    for (const h of cases) {
      const r = await post(`${b.url}/v1/chat/completions`, chat('only-b'), h);
      assert.equal(r.status, 401, `${JSON.stringify(h)} → ${r.status} ${r.text}`);
      assert.equal(JSON.parse(r.text).error.type, 'authentication_error');
    }
    const metrics = await (await request(`${b.url}/metrics`)).body.text();
    const total = [...metrics.matchAll(/^viiwork_forward_auth_rejected_total\{[^}]*\} (\d+)/gm)].reduce((n, m) => n + Number(m[1]), 0);
    assert.equal(total, cases.length);
  });

  it('refuses a replayed signed forward, and one signed for another member', async () => {
    const { RequestSigner } = await import('../../src/security/signing.ts');
    const body = JSON.stringify(chat('only-b'));
    const signer = new RequestSigner(Buffer.from(secret, 'base64'));
    const sha = crypto.createHash('sha256').update(body).digest('hex');
    // Captured on its way to another member (A itself here): B refuses it, the signature names its receiver.
    const toOther = signer.sign({ method: 'POST', pathWithQuery: '/v1/chat/completions', node: 'A', to: 'A', bodySha256: sha });
    const crossed = await request(`${b.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', ...toOther }, body });
    assert.equal(crossed.statusCode, 401, await crossed.body.text());
    const headers = signer.sign({ method: 'POST', pathWithQuery: '/v1/chat/completions', node: 'A', to: 'B', bodySha256: sha });
    const send = () =>
      request(`${b.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body }).then(async (r) => ({ status: r.statusCode, text: await r.body.text() }));
    const first = await send();
    assert.equal(first.status, 200, first.text);
    const replay = await send();
    assert.equal(replay.status, 401, replay.text);
    assert.match(replay.text, /nonce/);
  });

  it('a plain client request carrying X-Viiwork-Prefer is not a forward', async () => {
    const r = await post(`${b.url}/v1/chat/completions`, chat('s'), { 'x-viiwork-prefer': 'A' });
    assert.equal(r.status, 200);
    assert.equal(r.headers['x-viiwork-node'], 'A');
  });
});

describe('aliases across the mesh', () => {
  let a: MeshNode, c: MeshNode;
  before(async () => {
    const sim = { ttft_ms: 1, prefill_ms_per_1k: 1, tokens_per_s: 2000, output_tokens: 1 };
    a = await startMeshNode({ name: 'A', ip: IP(31), models: [{ name: 'real', engine: 'sim', parallel: 2, sim }] });
    c = await startMeshNode({ name: 'C', ip: IP(33), seeds: [a.gossip] });
    await waitConverged([a, c]);
    await waitModelOn(c, 'real', ['A']);
  });
  after(() => stopAll([a, c]));

  it('an alias set on A is used by clients of C, survives a restart of C, and stays removed after rm', async () => {
    const set = await request(`${a.url}/v1/aliases/nick`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ target: 'real', fallbacks: [] }) });
    assert.equal(set.statusCode, 200);
    await set.body.text();
    await waitFor(async () => (await post(`${c.url}/v1/chat/completions`, chat('nick'))).status === 200, { timeoutMs: 5000, what: 'alias reaches C' });
    const r = await post(`${c.url}/v1/chat/completions`, chat('nick'));
    assert.equal(r.headers['x-viiwork-alias'], 'nick');
    assert.equal(r.headers['x-viiwork-model'], 'real');
    await c.stop();
    c = await startMeshNode({ name: 'C', ip: IP(33), seeds: [a.gossip], stateDir: c.stateDir });
    await waitConverged([a, c]);
    await waitModelOn(c, 'real', ['A']);
    assert.equal((await post(`${c.url}/v1/chat/completions`, chat('nick'))).status, 200);
    const rm = await request(`${a.url}/v1/aliases/nick`, { method: 'DELETE' });
    assert.equal(rm.statusCode, 200);
    await rm.body.text();
    await waitFor(async () => (await post(`${c.url}/v1/chat/completions`, chat('nick'))).status === 404, { timeoutMs: 5000, what: 'removal reaches C' });
  });

});
