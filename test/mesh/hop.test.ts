/**
 * Issue 8, acceptance 1 and 3: the outcome of a request does not depend on
 * where it entered. An engine's own refusal (401, 403, 429, 400) is the
 * answer, relayed once; an engine's 500 is retried on another capable host,
 * else 502 with the engine's text; bodies reach the engine byte for byte.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import OpenAI, { NotFoundError } from 'openai';
import { request } from 'undici';
import { startFakeEngine, type FakeEngine } from '../fakes/fake-engine.ts';
import { startMeshNode, stopAll, waitConverged, waitModelOn, type MeshNode } from '../helpers/mesh.ts';

const IP = (n: number) => `127.0.23.${n}`;

async function post(url: string, body: string, headers: Record<string, string> = {}) {
  const t0 = performance.now();
  const r = await request(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
  const text = await r.body.text();
  return { status: r.statusCode, headers: r.headers, text, ms: performance.now() - t0 };
}

describe('the hop: an engine’s answer is the same wherever the request entered', () => {
  let engB: FakeEngine;
  let engC: FakeEngine;
  let a: MeshNode, b: MeshNode, c: MeshNode;
  before(async () => {
    const secret = crypto.randomBytes(32).toString('base64');
    const env = { VIIWORK_MESH_SECRET: secret };
    engB = await startFakeEngine({ name: 'engB', outputTokens: 3 });
    engC = await startFakeEngine({ name: 'engC', outputTokens: 3 });
    a = await startMeshNode({ name: 'A', ip: IP(1), env });
    b = await startMeshNode({ name: 'B', ip: IP(2), env, seeds: [a.gossip], models: [{ name: 'shared', engine: 'openai', url: engB.url, parallel: 2 }] });
    c = await startMeshNode({
      name: 'C',
      ip: IP(3),
      env,
      seeds: [a.gossip],
      models: [
        { name: 'only-c', engine: 'openai', url: engC.url, parallel: 2 },
        { name: 'shared', engine: 'openai', url: engC.url, parallel: 2 },
      ],
    });
    await waitConverged([a, b, c]);
    await waitModelOn(a, 'only-c', ['C']);
    await waitModelOn(a, 'shared', ['B', 'C']);
    await waitModelOn(b, 'only-c', ['C']);
  });
  after(async () => {
    await stopAll([a, b, c]);
    await engB?.close();
    await engC?.close();
  });

  for (const status of [401, 403, 429, 400]) {
    it(`an engine's ${status} reaches the client once, with its body, from the executor and from any other entry`, async () => {
      const seen: { status: number; message: string }[] = [];
      for (const entry of [c, a, b]) {
        engC.resetCounters();
        engC.failNext(status, `engine says ${status} for ${entry.name}`);
        const r = await post(`${entry.url}/v1/chat/completions`, JSON.stringify({ model: 'only-c', messages: [{ role: 'user', content: 'hi' }] }));
        assert.equal(r.status, status, `${entry.name}: ${r.text}`);
        assert.ok(r.ms < 1000, `answered in ${r.ms} ms`);
        assert.equal(engC.count('/v1/chat/completions'), 1, `the engine got exactly one request through ${entry.name}`);
        assert.equal(r.headers['x-viiwork-node'], 'C');
        assert.equal(r.headers['x-viiwork-refused'], undefined, 'an engine’s answer carries no refusal mark');
        seen.push({ status: r.status, message: JSON.parse(r.text).error.message });
      }
      for (const [i, s] of seen.entries()) assert.equal(s.message, `engine says ${status} for ${['C', 'A', 'B'][i]}`);
    });
  }

  it('an engine’s 500 is retried on another capable host', async () => {
    engB.resetCounters();
    engC.resetCounters();
    engB.failNext(500, 'B is on fire');
    const r = await post(`${a.url}/v1/chat/completions?prefer=B`, JSON.stringify({ model: 'shared', messages: [{ role: 'user', content: 'hi' }] }));
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers['x-viiwork-node'], 'C');
    assert.equal(engB.count('/v1/chat/completions'), 1);
    assert.equal(engC.count('/v1/chat/completions'), 1);
  });

  it('with no other capable host, an engine’s 500 is a 502 carrying the engine’s message, wherever the request entered', async () => {
    for (const entry of [c, a]) {
      engC.resetCounters();
      engC.failNext(500, `the GPU fell off the bus (${entry.name})`);
      const r = await post(`${entry.url}/v1/chat/completions`, JSON.stringify({ model: 'only-c', messages: [{ role: 'user', content: 'hi' }] }));
      assert.equal(r.status, 502, r.text);
      assert.ok(r.ms < 1000, `answered in ${r.ms} ms`);
      assert.match(JSON.parse(r.text).error.message, new RegExp(`the GPU fell off the bus \\(${entry.name}\\)`));
      assert.equal(r.headers['x-viiwork-refused'], undefined, 'the client never sees a mark meant for the entry node');
      assert.equal(engC.count('/v1/chat/completions'), 1);
    }
  });

  it('bodies reach the engine byte for byte through a forward, with only stream_options added to a stream, as application/json', async () => {
    const body = '{"model":"only-c","seed":9223372036854775807,"temperature":1.0,"messages":[{"role":"user","content":"caf\\u00e9 \\ud83d\\ude00"}],"x":{"deep":[1,2.50,{"k":null}]}}';
    engC.resetCounters();
    const r = await post(`${a.url}/v1/chat/completions`, body, { 'content-type': 'application/x-www-form-urlencoded' });
    assert.equal(r.status, 200, r.text);
    const got = engC.requests.find((q) => q.path === '/v1/chat/completions')!;
    assert.equal(got.body.toString('utf8'), body);
    assert.equal(got.headers['content-type'], 'application/json');

    engC.resetCounters();
    const streamed = body.replace('"seed"', '"stream":true,"seed"');
    const s = await post(`${a.url}/v1/chat/completions`, streamed);
    assert.equal(s.status, 200, s.text);
    assert.doesNotMatch(s.text, /"usage"/, 'the usage the node asked for is not shown to a client that did not ask');
    const sent = engC.requests.find((q) => q.path === '/v1/chat/completions')!.body.toString('utf8');
    assert.equal(sent, streamed.slice(0, -1) + ',"stream_options":{"include_usage":true}}');
  });

  it('models.retrieve finds a model served on another node; an unknown id is NotFoundError', async () => {
    const client = new OpenAI({ baseURL: `${a.url}/v1`, apiKey: 'none', maxRetries: 0 });
    const m = await client.models.retrieve('only-c');
    assert.equal(m.id, 'only-c');
    await assert.rejects(client.models.retrieve('no-such-model'), NotFoundError);
  });
});
