import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { request } from 'undici';
import { FakeEngine, fakePiece, parseSse, startFakeEngine } from '../fakes/fake-engine.ts';
import { waitFor } from '../fakes/wait.ts';

async function post(url: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await request(url, { method: 'POST', body: JSON.stringify(body), headers: { 'content-type': 'application/json', ...headers } });
  const text = await res.body.text();
  return { status: res.statusCode, headers: res.headers, text, json: () => JSON.parse(text) };
}

describe('FakeEngine', () => {
  let e: FakeEngine;
  before(async () => {
    e = await startFakeEngine({ name: 'f1' });
  });
  after(() => e.close());

  test('chat completion without stream answers usage.prompt_tokens of about body bytes / 4', async () => {
    const body = { model: 'm', messages: [{ role: 'user', content: 'x'.repeat(400) }] };
    const r = await post(`${e.url}/v1/chat/completions`, body);
    assert.equal(r.status, 200);
    assert.equal(r.headers['x-fake-engine'], 'f1');
    const j = r.json();
    assert.equal(j.object, 'chat.completion');
    assert.equal(j.choices[0].message.content, [0, 1, 2, 3].map(fakePiece).join(''));
    assert.equal(j.usage.prompt_tokens, Math.round(JSON.stringify(body).length / 4));
  });

  test('streamed chat ends with [DONE] and carries a usage chunk when asked', async () => {
    const r = await post(`${e.url}/v1/chat/completions`, { model: 'm', stream: true, stream_options: { include_usage: true }, messages: [] });
    assert.match(String(r.headers['content-type']), /text\/event-stream/);
    const events = parseSse(r.text);
    assert.equal(events.at(-1), '[DONE]');
    const usage = events.at(-2) as { choices: unknown[]; usage: { prompt_tokens: number } };
    assert.deepEqual(usage.choices, []);
    assert.ok(usage.usage.prompt_tokens > 0);
    const text = events
      .slice(0, -2)
      .map((c) => (c as { choices: Array<{ delta: { content?: string } }> }).choices[0]?.delta.content ?? '')
      .join('');
    assert.equal(text, [0, 1, 2, 3].map(fakePiece).join(''));
  });

  test('streamed completion without include_usage has no usage chunk', async () => {
    const r = await post(`${e.url}/v1/completions`, { model: 'm', stream: true, prompt: 'hi' });
    const events = parseSse(r.text);
    assert.equal(events.at(-1), '[DONE]');
    assert.ok(events.slice(0, -1).every((c) => (c as { usage?: unknown }).usage === undefined));
  });

  test('embeddings are deterministic unit vectors', async () => {
    const a = (await post(`${e.url}/v1/embeddings`, { input: ['one', 'two', 'one'] })).json();
    assert.equal(a.data.length, 3);
    assert.deepEqual(a.data[0].embedding, a.data[2].embedding);
    assert.notDeepEqual(a.data[0].embedding, a.data[1].embedding);
    const norm = Math.hypot(...(a.data[1].embedding as number[]));
    assert.ok(Math.abs(norm - 1) < 1e-9);
  });

  test('rerank answers llama-server shape on both paths, best first, top_n honoured', async () => {
    for (const path of ['/v1/rerank', '/rerank']) {
      const j = (await post(`${e.url}${path}`, { query: 'red apple', documents: ['blue sky', 'a red apple', 'green'], top_n: 2 })).json();
      assert.equal(j.results.length, 2);
      assert.equal(j.results[0].index, 1);
      assert.ok(j.results[0].relevance_score >= j.results[1].relevance_score);
    }
  });

  test('transcription parses the multipart file part', async () => {
    const audio = Buffer.from('RIFF fake wave data \u0000\u0001\u0002');
    const form = new FormData();
    form.append('model', 'whisper');
    form.append('file', new Blob([audio]), 'clip.wav');
    for (const path of ['/v1/audio/transcriptions', '/v1/audio/translations']) {
      const res = await fetch(`${e.url}${path}`, { method: 'POST', body: form });
      const j = (await res.json()) as { bytes: number; sha256_of_file: string; filename: string; model: string };
      assert.equal(j.bytes, audio.length);
      assert.equal(j.sha256_of_file, createHash('sha256').update(audio).digest('hex'));
      assert.equal(j.filename, 'clip.wav');
      assert.equal(j.model, 'whisper');
    }
  });

  test('speech answers audio/mpeg bytes', async () => {
    const res = await request(`${e.url}/v1/audio/speech`, { method: 'POST', body: JSON.stringify({ input: 'hello' }), headers: { 'content-type': 'application/json' } });
    assert.equal(res.headers['content-type'], 'audio/mpeg');
    const bytes = Buffer.from(await res.body.arrayBuffer());
    assert.ok(bytes.length > 10);
  });

  test('GET /props, /v1/models and unknown paths', async () => {
    const props = (await (await request(`${e.url}/props`)).body.json()) as { build_info: string; total_slots: number };
    assert.equal(props.build_info, 'b4500-abcdef');
    assert.equal(props.total_slots, 4);
    const models = (await (await request(`${e.url}/v1/models`)).body.json()) as { data: Array<{ id: string }> };
    assert.equal(models.data[0].id, 'fake-model');
    const nf = await request(`${e.url}/v1/nope`, { method: 'POST', body: '{}' });
    await nf.body.dump();
    assert.equal(nf.statusCode, 404);
  });

  test('hold() parks requests before their first byte until release()', async () => {
    e.hold();
    try {
      const p1 = post(`${e.url}/v1/chat/completions`, { messages: [] });
      const p2 = post(`${e.url}/v1/chat/completions`, { messages: [] });
      await e.waitFor((x) => x.heldCount === 2, 5000, 'two held');
      assert.equal(e.inFlight, 2);
      assert.equal(e.release(1), 1);
      const first = await Promise.race([p1, p2]);
      assert.equal(first.status, 200);
      assert.equal(e.heldCount, 1);
      assert.equal(e.releaseAll(), 1);
      const both = await Promise.all([p1, p2]);
      assert.deepEqual(
        both.map((r) => r.status),
        [200, 200],
      );
    } finally {
      e.hold(false);
    }
  });

  test('failNext answers one request with the status, then normal again', async () => {
    e.failNext(503);
    const a = await post(`${e.url}/v1/chat/completions`, { messages: [] });
    assert.equal(a.status, 503);
    assert.equal(a.json().error.code, 503);
    assert.equal(a.headers['retry-after'], '1');
    const b = await post(`${e.url}/v1/chat/completions`, { messages: [] });
    assert.equal(b.status, 200);
  });

  test('failMidStream sends one chunk then cuts the connection, not counted as an abort', async () => {
    const aborted = e.aborted;
    e.failMidStream();
    const res = await request(`${e.url}/v1/chat/completions`, { method: 'POST', body: JSON.stringify({ stream: true, messages: [] }), headers: { 'content-type': 'application/json' } });
    assert.equal(res.statusCode, 200);
    let got = '';
    await assert.rejects(async () => {
      for await (const chunk of res.body) got += chunk;
    });
    assert.match(got, /data: /);
    assert.doesNotMatch(got, /\[DONE\]/);
    assert.equal(e.aborted, aborted);
  });

  test('a client that disconnects while held is counted as aborted', async () => {
    const before = e.aborted;
    e.hold();
    try {
      const ac = new AbortController();
      const p = request(`${e.url}/v1/chat/completions`, { method: 'POST', body: '{}', headers: { 'content-type': 'application/json' }, signal: ac.signal }).catch((err: Error) => err);
      await e.waitFor((x) => x.heldCount === 1, 5000, 'held');
      ac.abort();
      await p;
      await e.waitFor((x) => x.aborted === before + 1 && x.heldCount === 0 && x.inFlight === 0, 5000, 'abort counted');
    } finally {
      e.hold(false);
    }
  });

  test('a client that disconnects mid-stream is counted as aborted', async () => {
    const before = e.aborted;
    e.chunkDelayMs = 50;
    try {
      const ac = new AbortController();
      const res = await request(`${e.url}/v1/chat/completions`, { method: 'POST', body: JSON.stringify({ stream: true }), headers: { 'content-type': 'application/json' }, signal: ac.signal });
      for await (const _ of res.body) {
        ac.abort();
        break;
      }
      await e.waitFor((x) => x.aborted === before + 1, 5000, 'abort counted');
    } finally {
      e.chunkDelayMs = 0;
    }
  });

  test('per-request delay header holds the first byte', async () => {
    const t0 = Date.now();
    const r = await post(`${e.url}/v1/embeddings`, { input: 'a' }, { 'x-fake-delay-ms': '120' });
    assert.equal(r.status, 200);
    assert.ok(Date.now() - t0 >= 100);
  });

  test('records bodies and headers per path', async () => {
    await post(`${e.url}/v1/completions`, { prompt: 'recorded', model: 'zz' }, { 'x-test': 'yes' });
    const last = e.requests.filter((r) => r.path === '/v1/completions').at(-1)!;
    assert.equal(last.json.prompt, 'recorded');
    assert.equal(last.headers['x-test'], 'yes');
    assert.ok(e.count('/v1/completions') >= 1);
    assert.equal(e.bodiesFor('/v1/completions').at(-1).model, 'zz');
  });
});

describe('FakeEngine loading', () => {
  test('/health answers 503 Loading model while loading, then 200', async () => {
    const e = await startFakeEngine({ loadingMs: 150 });
    try {
      const r = await request(`${e.url}/health`);
      assert.equal(r.statusCode, 503);
      assert.deepEqual(((await r.body.json()) as { error: { message: string } }).error.message, 'Loading model');
      await waitFor(() => !e.loading, { what: 'loaded' });
      const ok = await request(`${e.url}/health`);
      await ok.body.dump();
      assert.equal(ok.statusCode, 200);
      e.setLoading(true);
      const again = await request(`${e.url}/health`);
      await again.body.dump();
      assert.equal(again.statusCode, 503);
    } finally {
      await e.close();
    }
  });

  test('healthEndpoint: false makes /health a 404', async () => {
    const e = await startFakeEngine({ healthEndpoint: false });
    try {
      const r = await request(`${e.url}/health`);
      await r.body.dump();
      assert.equal(r.statusCode, 404);
    } finally {
      await e.close();
    }
  });
});
