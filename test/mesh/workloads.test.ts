/** Issue 5 across real nodes: a model name is not a capability. */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { Readable } from 'node:stream';
import { request } from 'undici';
import { startFakeEngine, type FakeEngine } from '../fakes/fake-engine.ts';
import { startFakePeer, type FakePeer } from '../fakes/fake-peer.ts';
import { waitFor } from '../fakes/wait.ts';
import { getJson, startMeshNode, stopAll, waitConverged, waitModelOn, type MeshNode } from '../helpers/mesh.ts';

const IP = (n: number) => `127.0.24.${n}`;

async function post(url: string, body: unknown, headers: Record<string, string> = {}) {
  const r = await request(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  const raw = Buffer.from(await r.body.arrayBuffer());
  return { status: r.statusCode, headers: r.headers, raw, json: raw.length ? JSON.parse(raw.toString()) : undefined };
}

function multipart(fields: Record<string, string>, file: Buffer): { boundary: string; body: Buffer } {
  const boundary = `----vw${crypto.randomBytes(8).toString('hex')}`;
  const parts: Buffer[] = [];
  for (const [k, v] of Object.entries(fields)) parts.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="${k}"\r\n\r\n${v}\r\n`));
  parts.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\n`), file, Buffer.from(`\r\n--${boundary}--\r\n`));
  return { boundary, body: Buffer.concat(parts) };
}

describe('workloads across the mesh', () => {
  const eng: Record<string, FakeEngine> = {};
  let a: MeshNode, b: MeshNode, c: MeshNode;
  let old: FakePeer, future: FakePeer;
  before(async () => {
    // A recent llama.cpp build: audio input needs b5400 or later (the version gate is tested on its own below).
    for (const n of ['aChat', 'bEmb', 'cChat', 'cEmb', 'cAudio', 'cAsr']) eng[n] = await startFakeEngine({ name: n, outputTokens: 2, buildInfo: 'b6000-abcdef', audio: n === 'cAsr' || n === 'cAudio' });
    a = await startMeshNode({ name: 'A', ip: IP(1), models: [{ name: 'm', engine: 'openai', url: eng.aChat.url, parallel: 2, workloads: ['chat'] }] });
    b = await startMeshNode({ name: 'B', ip: IP(2), seeds: [a.gossip], models: [{ name: 'm', engine: 'openai', url: eng.bEmb.url, parallel: 2, workloads: ['embeddings'] }] });
    c = await startMeshNode({
      name: 'C',
      ip: IP(3),
      seeds: [a.gossip],
      models: [
        // Two targets of one name on one node, with their own slots.
        { name: 'mixed', engine: 'openai', url: eng.cChat.url, parallel: 1, workloads: ['chat', 'completion'] },
        { name: 'mixed', engine: 'openai', url: eng.cEmb.url, parallel: 1, workloads: ['embeddings', 'rerank'] },
        // Audio: a chat target without audio, and an audio-flagged target that only does embeddings: neither transcribes.
        { name: 'voice', engine: 'openai', url: eng.cChat.url, parallel: 1, workloads: ['chat'] },
        { name: 'voice', engine: 'openai', url: eng.cAudio.url, parallel: 1, workloads: ['embeddings'], audio_input: true },
        // One descriptor with both: chat + audio.
        { name: 'ears', engine: 'openai', url: eng.cAsr.url, parallel: 1, workloads: ['chat'], audio_input: true },
      ],
    });
    old = await startFakePeer({ name: 'old', ip: IP(8), seed: a.gossip, models: [{ name: 'legacy', slots: 2, busy: 0 }] });
    future = await startFakePeer({
      name: 'future',
      ip: IP(9),
      seed: a.gossip,
      ver: '9.0.0',
      models: [{ name: 'legacy', slots: 2, busy: 0, targets: [{ workloads: ['vision'], audio: false, slots: 2, busy: 0 }] }],
    });
    await waitConverged([a, b, c]);
    await waitModelOn(a, 'm', ['A', 'B']);
    await waitModelOn(b, 'm', ['A', 'B']);
    await waitModelOn(a, 'mixed', ['C']);
    await waitModelOn(a, 'ears', ['C']);
    await waitModelOn(b, 'ears', ['C']);
    await waitModelOn(a, 'voice', ['C']);
    await waitModelOn(a, 'legacy', ['old', 'future']);
  });
  after(async () => {
    await stopAll([a, b, c]);
    await old?.close();
    await future?.close();
    for (const e of Object.values(eng)) await e.close();
  });

  it('embeddings through A run on B and chat through B runs on A; no engine gets the other’s workload', async () => {
    for (let i = 0; i < 3; i++) {
      const e = await post(`${a.url}/v1/embeddings`, { model: 'm', input: 'x' });
      assert.equal(e.status, 200);
      assert.equal(e.headers['x-viiwork-node'], 'B');
      const ch = await post(`${b.url}/v1/chat/completions`, { model: 'm', messages: [] });
      assert.equal(ch.status, 200);
      assert.equal(ch.headers['x-viiwork-node'], 'A');
    }
    assert.equal(eng.aChat.count('/v1/embeddings'), 0);
    assert.equal(eng.bEmb.count('/v1/chat/completions'), 0);
    assert.equal(eng.bEmb.count('/v1/embeddings'), 3);
  });

  it('a local target that cannot do the workload never hides a remote one that can (session, preference, local-first)', async () => {
    const variants: Record<string, string>[] = [{ 'x-session-id': 'sess-1' }, { 'x-session-id': 'sess-2' }, { 'x-viiwork-prefer': 'A' }, {}];
    for (const headers of variants) {
      const r = await post(`${a.url}/v1/embeddings`, { model: 'm', input: 'x' }, headers);
      assert.equal(r.status, 200);
      assert.equal(r.headers['x-viiwork-node'], 'B');
    }
    const pinned = await post(`${a.url}/v1/embeddings?host=A`, { model: 'm', input: 'x' });
    assert.equal(pinned.status, 400);
    assert.equal(pinned.json.error.code, 'unsupported_workload');
  });

  it('refuses a workload no live member does with 400 unsupported_workload, and an unknown path with 404', async () => {
    const r = await post(`${a.url}/v1/rerank`, { model: 'm', query: 'q', documents: ['a'] });
    assert.equal(r.status, 400);
    assert.equal(r.json.error.code, 'unsupported_workload');
    assert.equal((await post(`${a.url}/v1/images/generations`, { model: 'm', prompt: 'x' })).status, 404);
  });

  it('a forward reaching a node without the workload gets 503 Retry-After 1', async () => {
    const { Agent } = await import('undici');
    const fromA = new Agent({ localAddress: IP(1) });
    const r = await request(`${b.url}/v1/chat/completions`, { method: 'POST', dispatcher: fromA, headers: { 'content-type': 'application/json', 'x-viiwork-node': 'A' }, body: JSON.stringify({ model: 'm', messages: [] }) });
    const text = await r.body.text();
    assert.equal(r.statusCode, 503, text);
    assert.equal(r.headers['retry-after'], '1');
    await fromA.close();
  });

  it('two targets of one name on one node keep their own slots: a busy chat target does not make embeddings look full', async () => {
    eng.cChat.hold();
    try {
      const busy = post(`${a.url}/v1/chat/completions`, { model: 'mixed', messages: [] });
      await waitFor(() => eng.cChat.heldCount === 1, { what: 'chat target busy' });
      await waitFor(
        async () => {
          const cap = await getJson(`${c.url}/v1/capacity`);
          const t = cap.models.find((m: any) => m.name === 'mixed').targets;
          return t.find((x: any) => x.workloads.includes('chat')).busy === 1;
        },
        { what: 'C reports the chat target busy' },
      );
      const cap = await getJson(`${c.url}/v1/capacity`);
      const mixed = cap.models.find((m: any) => m.name === 'mixed');
      assert.deepEqual(
        mixed.targets.map((t: any) => [t.workloads.join(','), t.slots, t.busy]).sort(),
        [
          ['chat,completion', 1, 1],
          ['embeddings,rerank', 1, 0],
        ],
      );
      const e = await post(`${a.url}/v1/embeddings`, { model: 'mixed', input: 'x' });
      assert.equal(e.status, 200);
      assert.equal(e.headers['x-viiwork-node'], 'C');
      eng.cChat.releaseAll();
      assert.equal((await busy).status, 200);
    } finally {
      eng.cChat.hold(false);
    }
  });

  it('transcription needs one descriptor with both chat and audio; uploads arrive byte for byte, fixed-length and chunked', async () => {
    const audio = crypto.randomBytes(200_000);
    const sha = crypto.createHash('sha256').update(audio).digest('hex');
    const refused = multipart({ model: 'voice' }, audio);
    const r1 = await request(`${a.url}/v1/audio/transcriptions`, { method: 'POST', headers: { 'content-type': `multipart/form-data; boundary=${refused.boundary}` }, body: refused.body });
    const j1 = (await r1.body.json()) as any;
    assert.equal(r1.statusCode, 400);
    assert.equal(j1.error.code, 'unsupported_workload');
    const ok = multipart({ model: 'ears' }, audio);
    const fixed = await request(`${a.url}/v1/audio/transcriptions`, { method: 'POST', headers: { 'content-type': `multipart/form-data; boundary=${ok.boundary}` }, body: ok.body });
    const jf = (await fixed.body.json()) as any;
    assert.equal(fixed.statusCode, 200, JSON.stringify(jf));
    assert.equal(fixed.headers['x-viiwork-node'], 'C');
    assert.equal(jf.sha256_of_file, sha);
    async function* chunks() {
      for (let i = 0; i < ok.body.length; i += 7000) yield ok.body.subarray(i, i + 7000);
    }
    const chunked = await request(`${b.url}/v1/audio/translations`, { method: 'POST', headers: { 'content-type': `multipart/form-data; boundary=${ok.boundary}` }, body: Readable.from(chunks()) });
    const jc = (await chunked.body.json()) as any;
    assert.equal(chunked.statusCode, 200, JSON.stringify(jc));
    assert.equal(jc.sha256_of_file, sha);
    assert.equal(eng.cChat.count('/v1/audio/transcriptions'), 0);
    assert.equal(eng.cAudio.count('/v1/audio/transcriptions'), 0);
  });

  it('an older node without targets gets chat and completions only; a workload we do not know is never eligible but shows verbatim', async () => {
    const chatR = await post(`${a.url}/v1/chat/completions`, { model: 'legacy', messages: [] });
    assert.equal(chatR.status, 200);
    assert.equal(chatR.headers['x-viiwork-node'], 'old');
    const before = { ...old.received };
    for (const path of ['/v1/embeddings', '/v1/rerank']) {
      const r = await post(`${a.url}${path}`, { model: 'legacy', input: 'x', query: 'q', documents: ['d'] });
      assert.equal(r.status, 400);
      assert.equal(r.json.error.code, 'unsupported_workload');
    }
    assert.deepEqual(old.received, before);
    assert.equal(future.received['/v1/chat/completions'] ?? 0, 0);
    const fleet = await getJson(`${a.url}/v1/fleet/capacity`);
    const hosts = fleet.models.find((m: any) => m.name === 'legacy').hosts;
    assert.deepEqual(hosts.find((h: any) => h.node === 'future').targets[0].workloads, ['vision']);
    assert.equal(hosts.find((h: any) => h.node === 'old').targets, null);
    const models = await getJson(`${a.url}/v1/models`);
    assert.deepEqual(models.data.find((m: any) => m.id === 'legacy').workloads, ['chat', 'completion']);
  });

  it('passes non-streamed embeddings and rerank answers through byte for byte, locally and forwarded', async () => {
    const body = { model: 'mixed', input: ['alpha', 'beta'] };
    const direct = await post(`${eng.cEmb.url}/v1/embeddings`, body);
    const viaC = await post(`${c.url}/v1/embeddings`, body);
    const viaA = await post(`${a.url}/v1/embeddings`, body);
    assert.ok(direct.raw.equals(viaC.raw));
    assert.ok(direct.raw.equals(viaA.raw));
    const rr = { model: 'mixed', query: 'alpha', documents: ['beta', 'alpha gamma'] };
    const d2 = await post(`${eng.cEmb.url}/v1/rerank`, rr);
    assert.ok(d2.raw.equals((await post(`${a.url}/v1/rerank`, rr)).raw));
    assert.ok(d2.raw.equals((await post(`${a.url}/rerank`, rr)).raw));
  });
});
