import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { BackendInfo } from '../../src/engines/backend.ts';
import { EmbeddedBackend, embeddedDescriptor } from '../../src/engines/embedded/embedded.ts';
import { LoadLock } from '../../src/engines/load-lock.ts';
import { writeTinyGguf } from '../fakes/tiny-gguf.ts';
import { waitFor } from '../fakes/wait.ts';

const hasLib = await import('node-llama-cpp').then(
  () => true,
  () => false,
);
const skip = hasLib ? false : 'node-llama-cpp (optional dependency) is not installed';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'viiwork-embedded-'));
const modelPath = path.join(dir, 'tiny.gguf');
const info: BackendInfo = { id: 'tiny/0', model: 'tiny', index: 0, parallel: 2, context: 256, engine: 'embedded' };
const defaults = { workloads: ['chat', 'completion'], audio: false };
const settings = { path: modelPath, threads: 1, gpu: false };

function logger() {
  const lines: string[] = [];
  return { lines, log: (msg: string) => void lines.push(msg) };
}

async function post(url: string, body: unknown, signal?: AbortSignal): Promise<Response> {
  return fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal });
}

/** The `data:` payloads of an SSE body, in order. */
function sseData(text: string): string[] {
  return text
    .split('\n\n')
    .filter((e) => e.startsWith('data: '))
    .map((e) => e.slice('data: '.length));
}

const hello = [{ role: 'user', content: 'Hello there' }];

after(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('the embedded descriptor', () => {
  test('fills chat, completion and embeddings when the config lists no workloads', () => {
    assert.deepEqual(embeddedDescriptor(defaults, false), { descriptor: { workloads: ['chat', 'completion', 'embeddings'], audio: false }, withdrawn: [] });
  });
  test('keeps a listed workload it serves, withdraws one it does not, and never adds one', () => {
    const r = embeddedDescriptor({ workloads: ['chat', 'rerank'], audio: true }, true);
    assert.deepEqual(r.descriptor, { workloads: ['chat'], audio: false });
    assert.equal(r.withdrawn.length, 2);
    assert.match(r.withdrawn[0], /rerank withdrawn/);
    assert.match(r.withdrawn[1], /audio input withdrawn/);
  });
});

describe('EmbeddedBackend with a tiny GGUF', { skip }, () => {
  let b: EmbeddedBackend;
  const { lines, log } = logger();

  before(async () => {
    writeTinyGguf(modelPath);
    b = new EmbeddedBackend(info, defaults, settings, log, { loadLock: new LoadLock() });
    assert.equal(b.state, 'starting');
    await b.start();
  });
  after(async () => {
    await b?.stop();
  });

  test('becomes healthy on loopback and fills its workloads when the config left them out', async () => {
    assert.equal(b.state, 'healthy', b.reason);
    assert.match(b.url ?? '', /^http:\/\/127\.0\.0\.1:\d+$/);
    assert.deepEqual(b.descriptor.workloads, ['chat', 'completion', 'embeddings']);
    assert.deepEqual(await (await fetch(`${b.url}/health`)).json(), { status: 'ok' });
    const models = (await (await fetch(`${b.url}/v1/models`)).json()) as { data: { id: string }[] };
    assert.equal(models.data[0].id, 'tiny');
    assert.ok(lines.some((l) => l.includes('starting → healthy')));
  });

  test('answers a whole chat with content, usage and llama-server timings', async () => {
    const res = await post(`${b.url}/v1/chat/completions`, { model: 'tiny', messages: hello, max_tokens: 8, temperature: 0 });
    assert.equal(res.status, 200);
    const body = (await res.json()) as {
      choices: { message: { role: string; content: unknown }; finish_reason: string }[];
      usage: { prompt_tokens: number; completion_tokens: number };
      timings: { prompt_ms: number; prompt_n: number; predicted_n: number; predicted_ms: number };
    };
    assert.equal(body.choices[0].message.role, 'assistant');
    assert.equal(typeof body.choices[0].message.content, 'string');
    assert.ok(body.usage.prompt_tokens > 0);
    assert.ok(body.usage.completion_tokens > 0 && body.usage.completion_tokens <= 8);
    assert.equal(typeof body.timings.prompt_ms, 'number');
    assert.ok(body.timings.prompt_n > 0);
    assert.equal(body.timings.predicted_n, body.usage.completion_tokens);
    // Greedy decoding of the same prompt gives the same nonsense.
    const again = (await (await post(`${b.url}/v1/chat/completions`, { messages: hello, max_tokens: 8, temperature: 0 })).json()) as typeof body;
    assert.equal(again.choices[0].message.content, body.choices[0].message.content);
  });

  test('streams a chat as SSE chunks, then usage when asked, then [DONE]', async () => {
    const res = await post(`${b.url}/v1/chat/completions`, {
      messages: hello,
      max_tokens: 6,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
    });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /text\/event-stream/);
    const data = sseData(await res.text());
    assert.equal(data.at(-1), '[DONE]');
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d));
    assert.ok(chunks.length >= 3);
    assert.ok(chunks.every((c) => c.object === 'chat.completion.chunk'));
    assert.equal(chunks[0].choices[0].delta.role, 'assistant');
    assert.ok(chunks.at(-2).choices[0].finish_reason);
    const usage = chunks.at(-1);
    assert.deepEqual(usage.choices, []);
    assert.ok(usage.usage.prompt_tokens > 0);
  });

  test('answers a text completion', async () => {
    const res = await post(`${b.url}/v1/completions`, { prompt: 'Once upon a time', max_tokens: 5, temperature: 0 });
    assert.equal(res.status, 200);
    const body = (await res.json()) as { object: string; choices: { text: unknown; finish_reason: string }[]; usage: { prompt_tokens: number } };
    assert.equal(body.object, 'text_completion');
    assert.equal(typeof body.choices[0].text, 'string');
    assert.ok(body.usage.prompt_tokens > 0);
  });

  test('serves two requests in parallel on two sequences', async () => {
    const [a, c] = await Promise.all([
      post(`${b.url}/v1/chat/completions`, { messages: hello, max_tokens: 8 }),
      post(`${b.url}/v1/completions`, { prompt: 'abc', max_tokens: 8 }),
    ]);
    assert.equal(a.status, 200);
    assert.equal(c.status, 200);
    assert.equal(typeof ((await a.json()) as { choices: { message: { content: unknown } }[] }).choices[0].message.content, 'string');
    assert.equal(typeof ((await c.json()) as { choices: { text: unknown }[] }).choices[0].text, 'string');
  });

  test('embeds text as a vector of n_embd floats, and as base64', async () => {
    const res = await post(`${b.url}/v1/embeddings`, { input: ['hello world', 'bye'] });
    assert.equal(res.status, 200);
    const body = (await res.json()) as { data: { index: number; embedding: number[] }[]; usage: { prompt_tokens: number } };
    assert.equal(body.data.length, 2);
    assert.equal(body.data[0].embedding.length, 64);
    assert.ok(body.data[0].embedding.every((x) => Number.isFinite(x)));
    assert.ok(body.usage.prompt_tokens > 0);
    const b64 = (await (await post(`${b.url}/v1/embeddings`, { input: 'hello world', encoding_format: 'base64' })).json()) as { data: { embedding: string }[] };
    const raw = Buffer.from(b64.data[0].embedding, 'base64');
    const floats = new Float32Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.length));
    assert.equal(floats.length, 64);
    assert.ok(Math.abs(floats[0] - body.data[0].embedding[0]) < 1e-6);
  });

  test('a client that aborts mid-stream frees its sequence for the next requests', async () => {
    const abort = new AbortController();
    const res = await post(`${b.url}/v1/chat/completions`, { messages: hello, max_tokens: 230, temperature: 0, stream: true }, abort.signal);
    const reader = res.body!.getReader();
    const first = await reader.read();
    assert.ok(first.value && first.value.length > 0);
    abort.abort();
    await reader.cancel().catch(() => {});
    // The generation ends as aborted, not completed, and its sequence comes back.
    await waitFor(() => b.generations.aborted === 1, { what: 'the generation aborted' });
    await waitFor(() => b.freeSequences === 2, { what: 'both sequences free' });
    // Both sequences must be free again: two requests at once still complete.
    const both = await Promise.all([
      post(`${b.url}/v1/chat/completions`, { messages: hello, max_tokens: 4 }),
      post(`${b.url}/v1/chat/completions`, { messages: hello, max_tokens: 4 }),
    ]);
    assert.deepEqual(
      both.map((r) => r.status),
      [200, 200],
    );
    await Promise.all(both.map((r) => r.json()));
  });

  test('refuses a malformed body with 400 and an unknown path with 404', async () => {
    const bad = await fetch(`${b.url}/v1/chat/completions`, { method: 'POST', body: '{nope' });
    assert.equal(bad.status, 400);
    await bad.body?.cancel();
    const none = await post(`${b.url}/v1/rerank`, { query: 'q', documents: ['d'] });
    assert.equal(none.status, 404);
    await none.body?.cancel();
  });
});

describe('EmbeddedBackend lifecycle', { skip }, () => {
  test('a listed workload list is kept: embeddings is not added, rerank is withdrawn with a log line', async () => {
    writeTinyGguf(modelPath);
    const { lines, log } = logger();
    const b = new EmbeddedBackend({ ...info, id: 'tiny/1', parallel: 1 }, { workloads: ['chat', 'rerank'], audio: false }, settings, log, {
      workloadsExplicit: true,
      loadLock: new LoadLock(),
    });
    try {
      await b.start();
      assert.equal(b.state, 'healthy', b.reason);
      assert.deepEqual(b.descriptor.workloads, ['chat']);
      assert.ok(lines.some((l) => /tiny\/1: rerank withdrawn/.test(l)));
      const res = await post(`${b.url}/v1/embeddings`, { input: 'x' });
      assert.equal(res.status, 404);
      await res.body?.cancel();
    } finally {
      await b.stop();
    }
    assert.equal(b.state, 'stopped');
    assert.equal(b.url, undefined);
  });

  test('a missing model file makes the backend dead with a reason naming the path', async () => {
    const missing = path.join(dir, 'nowhere.gguf');
    const { lines, log } = logger();
    const b = new EmbeddedBackend(info, defaults, { ...settings, path: missing }, log, { loadLock: new LoadLock() });
    await b.start();
    assert.equal(b.state, 'dead');
    assert.ok(b.reason.includes(missing), b.reason);
    assert.ok(lines.some((l) => l.includes('dead') && l.includes(missing)));
    await b.stop();
  });

  test('a file that is not a GGUF makes the backend dead', async () => {
    const notGguf = path.join(dir, 'text.gguf');
    fs.writeFileSync(notGguf, 'hello, not a model');
    const { log } = logger();
    const b = new EmbeddedBackend(info, defaults, { ...settings, path: notGguf }, log, { loadLock: new LoadLock() });
    await b.start();
    assert.equal(b.state, 'dead');
    assert.match(b.reason, /not a GGUF/);
    await b.stop();
  });

  test('a truncated GGUF makes the backend dead with llama.cpp\'s reason, and the node lives on', async () => {
    const cut = path.join(dir, 'cut.gguf');
    const full = fs.readFileSync(writeTinyGguf(modelPath));
    fs.writeFileSync(cut, full.subarray(0, full.length - 5000));
    const { log } = logger();
    const b = new EmbeddedBackend(info, defaults, { ...settings, path: cut }, log, { loadLock: new LoadLock() });
    await b.start();
    assert.equal(b.state, 'dead');
    assert.match(b.reason, /cut\.gguf failed: /);
    await b.stop();
  });

  test('stop() during the load leaves nothing running', async () => {
    writeTinyGguf(modelPath);
    const { log } = logger();
    const b = new EmbeddedBackend({ ...info, id: 'tiny/2' }, defaults, settings, log, { loadLock: new LoadLock() });
    const started = b.start();
    await b.stop();
    await started;
    assert.equal(b.state, 'stopped');
    assert.equal(b.url, undefined);
    await waitFor(() => b.state === 'stopped', { what: 'stopped' });
  });
});
