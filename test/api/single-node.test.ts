/**
 * One node end to end through the official openai SDK: chat (streamed and
 * not), embeddings, the error contract, the queue, client disconnects,
 * /health and /v1/capacity.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { request } from 'undici';
import { startFakeEngine, type FakeEngine } from '../fakes/fake-engine.ts';
import { waitFor } from '../fakes/wait.ts';
import { startNode, type TestNode } from '../helpers/node.ts';

async function call(url: string, path: string, init: { method?: string; body?: string | Buffer; headers?: Record<string, string> } = {}) {
  const res = await request(url + path, { method: (init.method ?? 'POST') as 'POST', body: init.body, headers: { 'content-type': 'application/json', ...init.headers } });
  const text = await res.body.text();
  let json: any;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.statusCode, headers: res.headers, text, json };
}

function assertOpenAIError(r: { status: number; headers: Record<string, unknown>; json: any }, status: number, retryAfter?: string) {
  assert.equal(r.status, status, JSON.stringify(r.json));
  assert.match(String(r.headers['content-type']), /^application\/json/);
  assert.equal(typeof r.json?.error?.message, 'string');
  assert.equal(typeof r.json?.error?.type, 'string');
  assert.ok('code' in r.json.error);
  assert.equal(r.headers['retry-after'], retryAfter);
}

describe('single node with sim engines, through the openai SDK', () => {
  let t: TestNode;
  let client: OpenAI;
  before(async () => {
    t = await startNode({
      node: { name: 'solo' },
      api: { max_body: '4KiB' },
      models: [
        { name: 'chat-sim', engine: 'sim', parallel: 2, workloads: ['chat', 'completion'], sim: { ttft_ms: 5, prefill_ms_per_1k: 1, tokens_per_s: 2000, output_tokens: 8 } },
        { name: 'embed-sim', engine: 'sim', parallel: 2, workloads: ['embeddings', 'rerank'], sim: { ttft_ms: 1, prefill_ms_per_1k: 1, tokens_per_s: 1000, output_tokens: 1 } },
        { name: 'voice-sim', engine: 'sim', parallel: 1, workloads: ['speech'], sim: { ttft_ms: 1, prefill_ms_per_1k: 1, tokens_per_s: 1000, output_tokens: 1 } },
      ],
    });
    client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: 'none', maxRetries: 0 });
  });
  after(() => t.stop());

  it('answers a chat completion with the mesh headers', async () => {
    const { data, response } = await client.chat.completions.create({ model: 'chat-sim', messages: [{ role: 'user', content: 'hello' }] }).withResponse();
    assert.match(data.choices[0].message.content ?? '', /simulated/);
    assert.equal(response.headers.get('x-viiwork-node'), 'solo');
    assert.equal(response.headers.get('x-viiwork-origin'), 'solo');
    // A chat with a user message has an implicit affinity key (prefix affinity, on by default).
    assert.equal(response.headers.get('x-viiwork-route'), 'prefix');
    assert.equal(response.headers.get('x-viiwork-queued-ms'), '0');
  });

  it('streams a chat completion, without a usage chunk the client did not ask for', async () => {
    const { data: stream, response } = await client.chat.completions
      .create({ model: 'chat-sim', stream: true, messages: [{ role: 'user', content: 'hello' }] })
      .withResponse();
    assert.equal(response.headers.get('cache-control'), 'no-cache');
    assert.equal(response.headers.get('x-accel-buffering'), 'no');
    let text = '';
    let usageChunks = 0;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? '';
      if (chunk.usage) usageChunks++;
    }
    assert.match(text, /simulated/);
    assert.equal(usageChunks, 0);
  });

  it('keeps the usage chunk when the client asks for it', async () => {
    const stream = await client.chat.completions.create({
      model: 'chat-sim',
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: 'user', content: 'hello' }],
    });
    let usage: unknown;
    for await (const chunk of stream) if (chunk.usage) usage = chunk.usage;
    assert.ok(usage && (usage as { prompt_tokens: number }).prompt_tokens > 0);
  });

  it('answers embeddings', async () => {
    const r = await client.embeddings.create({ model: 'embed-sim', input: ['a', 'b'] });
    assert.equal(r.data.length, 2);
    assert.ok(r.data[0].embedding.length > 0);
  });

  it('answers legacy completions and rerank', async () => {
    const c = await client.completions.create({ model: 'chat-sim', prompt: 'once upon' });
    assert.match(c.choices[0].text, /simulated/);
    const r = await call(t.url, '/rerank', { body: JSON.stringify({ model: 'embed-sim', query: 'cat', documents: ['dog', 'a cat'] }) });
    assert.equal(r.status, 200);
    assert.equal(r.json.results[0].index, 1);
  });

  it('answers speech with the engine’s audio bytes and content type', async () => {
    const res = await client.audio.speech.create({ model: 'voice-sim', voice: 'alloy', input: 'hello' });
    assert.equal(res.headers.get('content-type'), 'audio/wav');
    assert.equal(res.headers.get('x-viiwork-node'), 'solo');
    assert.equal(Buffer.from(await res.arrayBuffer()).length, 1024);
  });

  it('answers malformed JSON and a missing model with 400', async () => {
    assertOpenAIError(await call(t.url, '/v1/chat/completions', { body: '{"model":' }), 400);
    assertOpenAIError(await call(t.url, '/v1/chat/completions', { body: '{"messages":[]}' }), 400);
    assertOpenAIError(await call(t.url, '/v1/chat/completions', { body: '[1,2]' }), 400);
  });

  it('answers an unknown model and an unknown path with 404', async () => {
    assertOpenAIError(await call(t.url, '/v1/chat/completions', { body: '{"model":"nope","messages":[]}' }), 404);
    assertOpenAIError(await call(t.url, '/v1/nothing-here', { body: '{}' }), 404);
    await assert.rejects(client.chat.completions.create({ model: 'nope', messages: [] }), (e: { status?: number }) => e.status === 404);
  });

  it('answers GET on a POST endpoint with 405', async () => {
    const r = await call(t.url, '/v1/chat/completions', { method: 'GET' });
    assertOpenAIError(r, 405);
    assert.equal(r.headers.allow, 'POST');
  });

  it('answers a body over api.max_body with 413', async () => {
    const big = JSON.stringify({ model: 'chat-sim', messages: [{ role: 'user', content: 'x'.repeat(5000) }] });
    assertOpenAIError(await call(t.url, '/v1/chat/completions', { body: big }), 413);
  });

  it('answers a workload the model does not do with 400 unsupported_workload', async () => {
    const r = await call(t.url, '/v1/embeddings', { body: '{"model":"chat-sim","input":"x"}' });
    assertOpenAIError(r, 400);
    assert.equal(r.json.error.code, 'unsupported_workload');
  });

  it('rejects ?host and ?prefer values that are not node names with 400', async () => {
    for (const q of ['?host=127.0.0.1:19499', '?prefer=http://127.0.0.1:19499/', `?prefer=${'a,'.repeat(9)}a`]) {
      assertOpenAIError(await call(t.url, `/v1/chat/completions${q}`, { body: '{"model":"chat-sim","messages":[]}' }), 400);
    }
  });

  it('refuses a browser write from a foreign origin with 403', async () => {
    const r = await call(t.url, '/v1/chat/completions', { body: '{"model":"chat-sim","messages":[]}', headers: { origin: 'https://evil.example' } });
    assertOpenAIError(r, 403);
  });

  it('refuses a DNS-rebinding browser request (Host and Origin both a foreign name); its own pages and SDKs still work', async () => {
    const port = new URL(t.url).port;
    const evil = `evil.example:${port}`;
    const rebound = await call(t.url, '/v1/aliases/x', { method: 'PUT', body: '{"target":"chat-sim"}', headers: { host: evil, origin: `http://${evil}` } });
    assertOpenAIError(rebound, 403);
    assert.equal(rebound.json.error.code, 'forbidden_host');
    const readByBrowser = await call(t.url, '/v1/models', { method: 'GET', headers: { host: evil, 'sec-fetch-site': 'same-origin' } });
    assert.equal(readByBrowser.status, 403);
    // The node's own page, by loopback address: allowed.
    const own = await call(t.url, '/v1/chat/completions', { body: '{"model":"chat-sim","messages":[]}', headers: { host: `127.0.0.1:${port}`, origin: `http://127.0.0.1:${port}` } });
    assert.equal(own.status, 200, own.text);
    // An SDK or curl sends neither Origin nor Sec-Fetch-Site: the Host it used does not matter.
    const sdk = await call(t.url, '/v1/models', { method: 'GET', headers: { host: evil } });
    assert.equal(sdk.status, 200);
  });

  it('publishes targets and slots in /v1/capacity', async () => {
    const r = await call(t.url, '/v1/capacity', { method: 'GET' });
    assert.equal(r.status, 200);
    assert.equal(r.json.node, 'solo');
    const chat = r.json.models.find((m: { name: string }) => m.name === 'chat-sim');
    assert.equal(chat.slots, 2);
    assert.equal(chat.busy, 0);
    assert.equal(chat.queued, 0);
    assert.equal(chat.ctx, 8192);
    assert.equal(chat.backends, 1);
    assert.equal(chat.healthy_backends, 1);
    // Earlier tests in this file ran chats: the target's cache digest says what its engine holds (issue 17).
    const { digest, ...target } = chat.targets[0];
    assert.deepEqual([target], [{ workloads: ['chat', 'completion'], audio: false, slots: 2, busy: 0, loading: 0, state: 'loaded', memory: 0 }]);
    assert.equal(chat.targets.length, 1);
    if (digest !== undefined) {
      assert.equal(typeof digest.v, 'number');
      assert.match(digest.links, /^[A-Za-z0-9+/]*={0,2}$/);
    }
    assert.match(r.json.digest_epoch, /^[0-9a-f]{8}$/);
  });

  it('lists models sorted with context length, owner and workloads', async () => {
    const r = await call(t.url, '/v1/models', { method: 'GET' });
    assert.deepEqual(
      r.json.data.map((m: any) => [m.id, m.owned_by, m.context_length, m.workloads]),
      [
        ['chat-sim', 'viiwork', 8192, ['chat', 'completion']],
        ['embed-sim', 'viiwork', 8192, ['embeddings', 'rerank']],
        ['voice-sim', 'viiwork', 8192, ['speech']],
      ],
    );
  });
});

describe('queue, disconnects and engine failures (held fake engine)', () => {
  let engine: FakeEngine;
  let t: TestNode;
  before(async () => {
    engine = await startFakeEngine({ name: 'held', outputTokens: 3 });
    t = await startNode({
      routing: { queue_max: 1, queue_timeout: '20s' },
      models: [{ name: 'held', engine: 'openai', url: engine.url, parallel: 1, workloads: ['chat', 'completion'] }],
    });
    await waitFor(() => t.node.backends[0].state === 'healthy', { what: 'backend healthy' });
  });
  after(async () => {
    await t.stop();
    await engine.close();
  });

  it('runs the first, queues the second, refuses the third with 429 Retry-After 2, then runs the second', async () => {
    engine.hold();
    const body = JSON.stringify({ model: 'held', messages: [{ role: 'user', content: 'q' }] });
    const first = call(t.url, '/v1/chat/completions', { body });
    await waitFor(() => engine.heldCount === 1, { what: 'first request held by the engine' });
    const second = call(t.url, '/v1/chat/completions', { body });
    await waitFor(() => t.node.queues.depth('held') === 1, { what: 'second request queued' });
    const third = await call(t.url, '/v1/chat/completions', { body });
    assertOpenAIError(third, 429, '2');
    assert.equal(engine.count('/v1/chat/completions'), 1);
    engine.release(1);
    assert.equal((await first).status, 200);
    await waitFor(() => engine.heldCount === 1, { what: 'second request reached the engine' });
    engine.hold(false);
    engine.releaseAll();
    const r2 = await second;
    assert.equal(r2.status, 200);
    assert.equal(r2.headers['x-viiwork-route'], 'queued');
    assert.ok(Number(r2.headers['x-viiwork-queued-ms']) > 0);
  });

  it('a member’s slot-waiting capacity poll is held until a slot is released, and answered at once when one is free', async () => {
    const free = await call(t.url, '/v1/capacity?wait=held&ms=2000', { method: 'GET' });
    assert.equal(free.status, 200);
    engine.hold();
    const body = JSON.stringify({ model: 'held', messages: [{ role: 'user', content: 'q' }] });
    const busy = call(t.url, '/v1/chat/completions', { body });
    await waitFor(() => engine.heldCount === 1, { what: 'the only slot busy' });
    let answered = false;
    const held = call(t.url, '/v1/capacity?wait=held&ms=2000', { method: 'GET' }).then((r) => ((answered = true), r));
    // Still held while the slot is busy (a plain poll answers at once meanwhile).
    const plain = await call(t.url, '/v1/capacity', { method: 'GET' });
    assert.equal(plain.json.models.find((m: { name: string }) => m.name === 'held').busy, 1);
    assert.equal(answered, false);
    engine.hold(false);
    engine.releaseAll();
    const r = await held;
    assert.equal(r.json.models.find((m: { name: string }) => m.name === 'held').busy, 0, 'the answer shows the freed slot');
    assert.equal((await busy).status, 200);
  });

  it('a client that disconnects mid-stream frees its slot and aborts the engine request', async () => {
    engine.resetCounters();
    engine.hold(false);
    engine.chunkDelayMs = 200;
    engine.outputTokens = 50;
    const ac = new AbortController();
    const res = await request(`${t.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'held', stream: true, messages: [{ role: 'user', content: 'q' }] }),
      signal: ac.signal,
    });
    assert.equal(res.statusCode, 200);
    const reader = res.body[Symbol.asyncIterator]();
    await reader.next(); // the first chunk arrived: we are mid-stream
    assert.equal(t.node.slots.freeFor('held', 'chat'), 0);
    ac.abort();
    res.body.destroy();
    await waitFor(() => engine.aborted === 1, { timeoutMs: 2000, what: 'engine saw the abort' });
    await waitFor(() => t.node.slots.freeFor('held', 'chat') === 1, { timeoutMs: 2000, what: 'slot freed' });
    engine.chunkDelayMs = 0;
    engine.outputTokens = 3;
  });

  it('answers 502 when the engine fails before the first byte', async () => {
    engine.failNext(500);
    const r = await call(t.url, '/v1/chat/completions', { body: '{"model":"held","messages":[]}' });
    assertOpenAIError(r, 502);
    assert.equal(t.node.slots.freeFor('held', 'chat'), 1);
  });

  it('ends a stream that fails mid-way with an SSE error event', async () => {
    engine.failMidStream();
    const r = await call(t.url, '/v1/chat/completions', { body: '{"model":"held","stream":true,"messages":[]}' });
    assert.equal(r.status, 200);
    assert.match(r.text, /event: error\ndata: \{"error":\{"message":"[^"]+","type":"server_error","code":"engine_failed"\}\}/);
    await waitFor(() => t.node.slots.freeFor('held', 'chat') === 1, { what: 'slot freed' });
  });

  it('answers 503 Retry-After 5 when every backend is down, and /health stays 200', async () => {
    engine.setHealthStatus(500);
    await waitFor(() => t.node.backends[0].state !== 'healthy', { timeoutMs: 15_000, what: 'backend unhealthy' });
    assertOpenAIError(await call(t.url, '/v1/chat/completions', { body: '{"model":"held","messages":[]}' }), 503, '5');
    const h = await call(t.url, '/health', { method: 'GET' });
    assert.equal(h.status, 200);
    assert.equal(h.json.serving, false);
    engine.setHealthStatus(undefined);
    await waitFor(() => t.node.backends[0].state === 'healthy', { timeoutMs: 15_000, what: 'backend healthy again' });
  });
});

describe('queue deadline', () => {
  it('a queued request whose queue_timeout passes gets 429 Retry-After 2', async () => {
    const engine = await startFakeEngine({ name: 'slow' });
    const t = await startNode({
      routing: { queue_max: 4, queue_timeout: '300ms' },
      models: [{ name: 'slow', engine: 'openai', url: engine.url, parallel: 1 }],
    });
    try {
      await waitFor(() => t.node.backends[0].state === 'healthy', { what: 'backend healthy' });
      engine.hold();
      const body = '{"model":"slow","messages":[]}';
      const first = call(t.url, '/v1/chat/completions', { body });
      await waitFor(() => engine.heldCount === 1, { what: 'first held' });
      const r = await call(t.url, '/v1/chat/completions', { body });
      assertOpenAIError(r, 429, '2');
      assert.equal(r.json.error.code, 'queue_timeout');
      engine.releaseAll();
      engine.hold(false);
      assert.equal((await first).status, 200);
    } finally {
      await t.stop();
      await engine.close();
    }
  });
});

describe('/metrics', () => {
  it('exposes every metric SPEC section 10 names, in Prometheus text format', async () => {
    const t = await startNode({ models: [{ name: 'mm', engine: 'sim', parallel: 1, sim: { ttft_ms: 1, prefill_ms_per_1k: 1, tokens_per_s: 1000, output_tokens: 1 } }] });
    try {
      const r = await call(t.url, '/v1/chat/completions', { body: '{"model":"mm","stream":true,"messages":[]}' });
      assert.equal(r.status, 200);
      const m = await call(t.url, '/metrics', { method: 'GET' });
      assert.match(String(m.headers['content-type']), /^text\/plain/);
      for (const name of [
        'viiwork_requests_total{model="mm",workload="chat",route="local",outcome="200"} 1',
        'viiwork_queue_depth',
        'viiwork_queue_wait_seconds',
        'viiwork_ttft_seconds_count{model="mm"} 1',
        'viiwork_forwards_total',
        'viiwork_forward_line_depth{model="mm"} 0',
        'viiwork_capacity_report_age_seconds',
        'viiwork_members{state="alive"} 1',
        'viiwork_engine_restarts_total',
      ]) {
        assert.ok(m.text.includes(name), `missing ${name}`);
      }
    } finally {
      await t.stop();
    }
  });
});
