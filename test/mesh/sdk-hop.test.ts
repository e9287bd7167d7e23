/**
 * The official openai SDK through the hop, in a secured mesh: every request
 * enters G (a gateway that serves nothing) and runs on X (the executor that
 * has the engines), so each one is a signed forward whose body is hashed,
 * multipart uploads included. Each test asserts what a user of the SDK would
 * notice: the values the SDK hands back, its error classes, its headers.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import OpenAI, { APIError, APIUserAbortError, AuthenticationError, BadRequestError, InternalServerError, NotFoundError, RateLimitError, toFile } from 'openai';
import { request } from 'undici';
import { fakeEmbedding, fakePiece, parseMultipart, startFakeEngine, type FakeEngine } from '../fakes/fake-engine.ts';
import { waitFor } from '../fakes/wait.ts';
import { getJson, startMeshNode, stopAll, waitConverged, waitModelOn, type MeshNode } from '../helpers/mesh.ts';

const IP = (n: number) => `127.0.70.${n}`;

const CHAT_TOKENS = 5;
const EMBED_DIM = 16;
const USER = [{ role: 'user' as const, content: 'hello through the hop' }];

/** The text the fake engine generates with `n` pieces. */
function fakeText(n: number): string {
  let s = '';
  for (let i = 0; i < n; i++) s += fakePiece(i);
  return s;
}

/** The rejection of `p` (fails the test if it resolves). */
async function rejection(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (err) {
    return err;
  }
  assert.fail('expected the call to fail');
}

describe('the openai SDK through a signed hop (gateway G, executor X)', () => {
  let chatEng: FakeEngine; // chat + completion
  let narrowEng: FakeEngine; // chat with one slot, long slow streams
  let embedEng: FakeEngine;
  let speechEng: FakeEngine;
  let asrEng: FakeEngine;
  let g: MeshNode, x: MeshNode;
  let client: OpenAI;

  before(async () => {
    const env = { VIIWORK_MESH_SECRET: crypto.randomBytes(32).toString('base64') };
    chatEng = await startFakeEngine({ name: 'chat', outputTokens: CHAT_TOKENS });
    // A stream on `narrow` would run for minutes: only an abort ends it early.
    narrowEng = await startFakeEngine({ name: 'narrow', outputTokens: 10_000, chunkDelayMs: 20 });
    embedEng = await startFakeEngine({ name: 'embed', embeddingDim: EMBED_DIM });
    speechEng = await startFakeEngine({ name: 'speech' });
    // A llama.cpp build recent enough for transcription (older ones have it withdrawn, SPEC section 8).
    asrEng = await startFakeEngine({ name: 'asr', buildInfo: 'b6000-abcdef' });
    x = await startMeshNode({
      name: 'X',
      ip: IP(2),
      env,
      models: [
        { name: 'chat-model', engine: 'openai', url: chatEng.url, parallel: 4, workloads: ['chat', 'completion'] },
        { name: 'narrow', engine: 'openai', url: narrowEng.url, parallel: 1, workloads: ['chat'] },
        { name: 'embedder', engine: 'openai', url: embedEng.url, parallel: 2, workloads: ['embeddings'] },
        { name: 'voice', engine: 'openai', url: speechEng.url, parallel: 2, workloads: ['speech'] },
        { name: 'whisper', engine: 'openai', url: asrEng.url, parallel: 2, workloads: ['transcription'] },
      ],
    });
    // The gateway: no models; a queue of one per (model, workload), so a second waiter finds it full.
    g = await startMeshNode({ name: 'G', ip: IP(1), env, seeds: [x.gossip], routing: { queue_max: 1, queue_timeout: '30s' } });
    await waitConverged([g, x]);
    for (const m of ['chat-model', 'narrow', 'embedder', 'voice', 'whisper']) await waitModelOn(g, m, ['X']);
    client = new OpenAI({ baseURL: `${g.url}/v1`, apiKey: 'none', maxRetries: 0 });
  });

  after(async () => {
    await stopAll([g, x]);
    for (const e of [chatEng, narrowEng, embedEng, speechEng, asrEng]) await e?.close();
  });

  /** The answer came from X through G. */
  function assertHop(headers: Headers) {
    assert.equal(headers.get('x-viiwork-node'), 'X');
    assert.equal(headers.get('x-viiwork-origin'), 'G');
  }

  it('the mesh is secured: X checks the signature of a forward claim, and a forged one is AuthenticationError', async () => {
    const forged = {
      'X-Viiwork-Node': 'G',
      'X-Viiwork-Ts': String(Date.now()),
      'X-Viiwork-Nonce': crypto.randomBytes(16).toString('hex'),
      'X-Viiwork-Auth': `v2=${'0'.repeat(64)}`,
    };
    const impostor = new OpenAI({ baseURL: `${x.url}/v1`, apiKey: 'none', maxRetries: 0, defaultHeaders: forged });
    const before = chatEng.count('/v1/chat/completions');
    const err = await rejection(impostor.chat.completions.create({ model: 'chat-model', messages: USER }));
    assert.ok(err instanceof AuthenticationError, String(err));
    assert.equal(err.status, 401);
    // An open mesh would judge the claim by its source address; only a secured one checks a signature.
    assert.match(err.message, /bad signature/);
    assert.equal(chatEng.count('/v1/chat/completions'), before);
  });

  it('chat.completions.create, not streamed: the engine’s message and usage, from X', async () => {
    const { data, response } = await client.chat.completions.create({ model: 'chat-model', messages: USER }).withResponse();
    assertHop(response.headers);
    assert.equal(data.object, 'chat.completion');
    assert.equal(data.choices[0].message.role, 'assistant');
    assert.equal(data.choices[0].message.content, fakeText(CHAT_TOKENS));
    assert.equal(data.choices[0].finish_reason, 'stop');
    assert.equal(data.usage?.completion_tokens, CHAT_TOKENS);
    assert.ok((data.usage?.prompt_tokens ?? 0) > 0);
  });

  it('chat.completions.create streamed without stream_options: the text reassembles and no usage chunk reaches the client', async () => {
    chatEng.resetCounters();
    const { data: stream, response } = await client.chat.completions.create({ model: 'chat-model', messages: USER, stream: true }).withResponse();
    assertHop(response.headers);
    assert.match(response.headers.get('content-type') ?? '', /^text\/event-stream/);
    let text = '';
    let usageChunks = 0;
    let finish: string | null | undefined;
    for await (const chunk of stream) {
      if (chunk.usage) usageChunks++;
      text += chunk.choices[0]?.delta?.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(text, fakeText(CHAT_TOKENS));
    assert.equal(finish, 'stop');
    assert.equal(usageChunks, 0, 'the usage the node asked for on its own behalf is not shown');
    // The executor asked its engine for usage (to measure); the client never sees that.
    assert.deepEqual(chatEng.bodiesFor('/v1/chat/completions')[0].stream_options, { include_usage: true });
  });

  it('chat.completions.create streamed with include_usage: exactly one usage chunk, last, with empty choices', async () => {
    const stream = await client.chat.completions.create({ model: 'chat-model', messages: USER, stream: true, stream_options: { include_usage: true } });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    const withUsage = chunks.filter((c) => c.usage);
    assert.equal(withUsage.length, 1);
    assert.equal(chunks.at(-1), withUsage[0]);
    assert.deepEqual(withUsage[0].choices, []);
    assert.equal(withUsage[0].usage?.completion_tokens, CHAT_TOKENS);
    assert.ok((withUsage[0].usage?.prompt_tokens ?? 0) > 0);
    assert.equal(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join(''), fakeText(CHAT_TOKENS));
  });

  it('chat.completions.stream(): content events and finalChatCompletion() match the engine’s text', async () => {
    const stream = client.chat.completions.stream({ model: 'chat-model', messages: USER });
    let deltas = '';
    stream.on('content', (delta) => (deltas += delta));
    const final = await stream.finalChatCompletion();
    assert.equal(deltas, fakeText(CHAT_TOKENS));
    assert.equal(final.choices[0].message.content, fakeText(CHAT_TOKENS));
    assert.equal(final.choices[0].finish_reason, 'stop');
    assert.equal(await stream.finalContent(), fakeText(CHAT_TOKENS));
  });

  it('tool calls: returned whole, streamed through .stream(), and round-tripped by runTools', async () => {
    const parameters = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] };
    const tools = [{ type: 'function' as const, function: { name: 'weather', description: 'weather in a city', parameters } }];

    const whole = await client.chat.completions.create({ model: 'chat-model', messages: USER, tools });
    assert.equal(whole.choices[0].finish_reason, 'tool_calls');
    const call = whole.choices[0].message.tool_calls?.[0];
    assert.ok(call && call.type === 'function', JSON.stringify(whole.choices[0].message));
    assert.equal(call.function.name, 'weather');
    assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Oslo' });

    const streamed = client.chat.completions.stream({ model: 'chat-model', messages: USER, tools });
    const final = await streamed.finalChatCompletion();
    const sc = final.choices[0].message.tool_calls?.[0];
    assert.ok(sc && sc.type === 'function', JSON.stringify(final.choices[0].message));
    assert.equal(sc.id, 'call_fake_1');
    assert.equal(sc.function.name, 'weather');
    assert.equal(sc.function.arguments, '{"city":"Oslo"}');

    chatEng.resetCounters();
    const calls: unknown[] = [];
    const runner = client.chat.completions.runTools({
      model: 'chat-model',
      stream: true,
      messages: USER,
      tools: [
        {
          type: 'function',
          function: {
            name: 'weather',
            description: 'weather in a city',
            parameters,
            parse: JSON.parse,
            function: (args: unknown) => {
              calls.push(args);
              return '{"temp":3}';
            },
          },
        },
      ],
    });
    assert.equal(await runner.finalContent(), fakeText(CHAT_TOKENS));
    assert.deepEqual(calls, [{ city: 'Oslo' }]);
    const sent = chatEng.bodiesFor('/v1/chat/completions');
    assert.equal(sent.length, 2);
    assert.deepEqual(sent[1].messages.at(-1), { role: 'tool', tool_call_id: 'call_fake_1', content: '{"temp":3}' });
  });

  it('chat.completions.parse with a json_schema response_format: the parsed object', async () => {
    const r = await client.chat.completions.parse({
      model: 'chat-model',
      messages: USER,
      response_format: { type: 'json_schema', json_schema: { name: 'answer', strict: true, schema: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'], additionalProperties: false } } },
    });
    assert.deepEqual(r.choices[0].message.parsed, { ok: true });
  });

  it('a stream that breaks after its first chunk ends in an APIError from the SDK iterator, not a silent truncation', async () => {
    chatEng.resetCounters();
    chatEng.failMidStream(1);
    const stream = await client.chat.completions.create({ model: 'chat-model', messages: USER, stream: true });
    let text = '';
    const err = await rejection(
      (async () => {
        for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
      })(),
    );
    assert.ok(err instanceof APIError, String(err));
    assert.match(err.message, /mid-stream/);
    assert.equal(text, fakePiece(0));
    assert.equal(chatEng.count('/v1/chat/completions'), 1, 'nothing is retried after the first byte');
  });

  it('completions.create, not streamed and streamed (usage only when asked)', async () => {
    const { data, response } = await client.completions.create({ model: 'chat-model', prompt: 'Once upon a time' }).withResponse();
    assertHop(response.headers);
    assert.equal(data.object, 'text_completion');
    assert.equal(data.choices[0].text, fakeText(CHAT_TOKENS));
    assert.equal(data.usage?.completion_tokens, CHAT_TOKENS);

    const plain = await client.completions.create({ model: 'chat-model', prompt: 'Once upon a time', stream: true, max_tokens: 3 });
    let text = '';
    let usage = 0;
    for await (const chunk of plain) {
      text += chunk.choices[0]?.text ?? '';
      if (chunk.usage) usage++;
    }
    assert.equal(text, fakeText(3));
    assert.equal(usage, 0);

    const asked = await client.completions.create({ model: 'chat-model', prompt: 'Once upon a time', stream: true, stream_options: { include_usage: true } });
    const chunks = [];
    for await (const chunk of asked) chunks.push(chunk);
    assert.equal(chunks.map((c) => c.choices[0]?.text ?? '').join(''), fakeText(CHAT_TOKENS));
    assert.equal(chunks.filter((c) => c.usage).length, 1);
    assert.equal(chunks.at(-1)?.usage?.completion_tokens, CHAT_TOKENS);
  });

  it('embeddings.create with the SDK’s default (base64 on the wire, decoded by the SDK): the engine’s float32 vectors', async () => {
    embedEng.resetCounters();
    const inputs = ['alpha', 'beta gamma', 'ünïcødé ✓'];
    const { data, response } = await client.embeddings.create({ model: 'embedder', input: inputs }).withResponse();
    assertHop(response.headers);
    assert.equal(embedEng.bodiesFor('/v1/embeddings')[0].encoding_format, 'base64', 'the SDK asked for base64 and the hop kept it');
    assert.equal(data.data.length, inputs.length);
    for (const [i, text] of inputs.entries()) {
      assert.equal(data.data[i].index, i);
      assert.deepEqual(data.data[i].embedding, Array.from(new Float32Array(fakeEmbedding(text, EMBED_DIM))));
    }
  });

  it('embeddings.create with encoding_format float: exactly the engine’s vectors', async () => {
    const r = await client.embeddings.create({ model: 'embedder', input: ['alpha', 'beta gamma'], encoding_format: 'float' });
    assert.deepEqual(
      r.data.map((d) => d.embedding),
      ['alpha', 'beta gamma'].map((t) => fakeEmbedding(t, EMBED_DIM)),
    );
    assert.ok(r.usage.prompt_tokens > 0);
  });

  it('audio.transcriptions.create with toFile: a multipart upload through the signed hop reaches the engine byte for byte', async () => {
    asrEng.resetCounters();
    // Bytes that look like multipart syntax on purpose, around random audio.
    const audio = Buffer.concat([Buffer.from('RIFF\r\n--\r\n\r\n'), crypto.randomBytes(300_000), Buffer.from('\r\n--x--\r\n')]);
    const { data, response } = await client.audio.transcriptions
      .create({ model: 'whisper', file: await toFile(audio, 'clip.wav', { type: 'audio/wav' }), language: 'no', prompt: 'fjørd ✓' })
      .withResponse();
    assertHop(response.headers);
    const got = data as typeof data & { sha256_of_file: string; bytes: number; filename: string; fields: Record<string, string> };
    assert.equal(got.text, `transcribed ${audio.length} bytes of clip.wav`);
    assert.equal(got.sha256_of_file, crypto.createHash('sha256').update(audio).digest('hex'));
    assert.equal(got.bytes, audio.length);
    assert.deepEqual(got.fields, { model: 'whisper', language: 'no', prompt: 'fjørd ✓' });
    const [req] = asrEng.requests.filter((r) => r.path === '/v1/audio/transcriptions');
    const file = parseMultipart(req.body, req.headers['content-type'])?.find((p) => p.name === 'file');
    assert.ok(file);
    assert.ok(file.data.equals(audio), 'the file part arrived unchanged');
    assert.equal(file.contentType, 'audio/wav');
  });

  it('audio.translations.create with toFile: the translation of the exact bytes', async () => {
    const audio = crypto.randomBytes(70_000);
    const r = await client.audio.translations.create({ model: 'whisper', file: await toFile(audio, 'speech.mp3', { type: 'audio/mpeg' }) });
    const got = r as typeof r & { sha256_of_file: string };
    assert.equal(got.text, `translated ${audio.length} bytes of speech.mp3`);
    assert.equal(got.sha256_of_file, crypto.createHash('sha256').update(audio).digest('hex'));
    assert.equal(asrEng.count('/v1/audio/translations'), 1);
  });

  it('audio.speech.create: the binary audio read with arrayBuffer() is the engine’s, byte for byte', async () => {
    const input = 'Hello from the other node, with ünïcødé. '.repeat(40);
    const direct = await request(`${speechEng.url}/v1/audio/speech`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'voice', voice: 'alloy', input }) });
    const expected = Buffer.from(await direct.body.arrayBuffer());
    const { data: speech, response } = await client.audio.speech.create({ model: 'voice', voice: 'alloy', input }).withResponse();
    assertHop(response.headers);
    assert.equal(speech.headers.get('content-type'), 'audio/mpeg');
    const got = Buffer.from(await speech.arrayBuffer());
    assert.ok(got.length > 20_000, `${got.length} bytes`);
    assert.ok(got.equals(expected), 'the audio arrived unchanged');
  });

  it('responses.create through the hop to a chat-only engine: translated, with output_text and usage', async () => {
    chatEng.resetCounters();
    const { data: r, response } = await client.responses.create({ model: 'chat-model', instructions: 'be brief', input: 'hello there' }).withResponse();
    assertHop(response.headers);
    assert.equal(r.object, 'response');
    assert.equal(r.status, 'completed');
    assert.equal(r.output_text, fakeText(CHAT_TOKENS));
    assert.equal(r.usage?.output_tokens, CHAT_TOKENS);
    assert.equal(chatEng.count('/v1/responses'), 0);
    assert.deepEqual(chatEng.bodiesFor('/v1/chat/completions')[0].messages[0], { role: 'system', content: 'be brief' });
  });

  it('responses.stream through the hop: text deltas reassemble into finalResponse()', async () => {
    const stream = client.responses.stream({ model: 'chat-model', input: 'stream please' });
    let deltas = '';
    for await (const ev of stream) if (ev.type === 'response.output_text.delta') deltas += ev.delta;
    const final = await stream.finalResponse();
    assert.equal(deltas, fakeText(CHAT_TOKENS));
    assert.equal(final.output_text, deltas);
    assert.equal(final.status, 'completed');
    assert.equal(final.usage?.output_tokens, CHAT_TOKENS);
  });

  it('models.list and models.retrieve on the gateway show every model X serves, with its workloads', async () => {
    const list = [];
    for await (const m of client.models.list()) list.push(m as typeof m & { workloads: string[] });
    assert.deepEqual(
      list.map((m) => [m.id, m.owned_by, m.workloads]),
      [
        ['chat-model', 'viiwork', ['chat', 'completion']],
        ['embedder', 'viiwork', ['embeddings']],
        ['narrow', 'viiwork', ['chat']],
        ['voice', 'viiwork', ['speech']],
        ['whisper', 'viiwork', ['transcription']],
      ],
    );
    const one = (await client.models.retrieve('whisper')) as Awaited<ReturnType<typeof client.models.retrieve>> & { workloads: string[] };
    assert.equal(one.id, 'whisper');
    assert.equal(one.object, 'model');
    assert.deepEqual(one.workloads, ['transcription']);
  });

  it('an unknown model is NotFoundError, on JSON, binary and list endpoints', async () => {
    for (const call of [
      () => client.chat.completions.create({ model: 'no-such-model', messages: USER }),
      () => client.audio.speech.create({ model: 'no-such-model', voice: 'alloy', input: 'x' }),
      () => client.models.retrieve('no-such-model'),
    ]) {
      const err = await rejection(call());
      assert.ok(err instanceof NotFoundError, String(err));
      assert.equal(err.status, 404);
    }
    const err = (await rejection(client.chat.completions.create({ model: 'no-such-model', messages: USER }))) as NotFoundError;
    assert.equal(err.code, 'model_not_found');
  });

  it('a workload no target does is BadRequestError with code unsupported_workload (JSON and multipart), and no engine sees it', async () => {
    // What the engines were asked, their health checks aside (the node's own poller makes those on its schedule).
    const asked = (received: Record<string, number>) => Object.fromEntries(Object.entries(received).filter(([path]) => path !== '/health'));
    const before = { chat: asked(chatEng.received), speech: asked(speechEng.received) };
    const wav = await toFile(Buffer.from('RIFF....'), 'a.wav', { type: 'audio/wav' });
    const calls = [
      () => client.embeddings.create({ model: 'chat-model', input: 'x' }),
      () => client.audio.speech.create({ model: 'chat-model', voice: 'alloy', input: 'x' }),
      () => client.audio.transcriptions.create({ model: 'voice', file: wav }),
      () => client.completions.create({ model: 'narrow', prompt: 'x' }),
    ];
    for (const call of calls) {
      const err = await rejection(call());
      assert.ok(err instanceof BadRequestError, String(err));
      assert.equal(err.status, 400);
      assert.equal(err.code, 'unsupported_workload');
    }
    assert.deepEqual(asked(chatEng.received), before.chat);
    assert.deepEqual(asked(speechEng.received), before.speech);
    assert.equal(narrowEng.count('/v1/completions'), 0);
  });

  it('a full fleet (its one slot busy, the gateway’s queue full) is RateLimitError at once, with Retry-After in its headers', async () => {
    narrowEng.hold();
    try {
      const first = client.chat.completions.create({ model: 'narrow', messages: USER, max_tokens: 1 }).withResponse();
      await waitFor(() => narrowEng.heldCount === 1, { timeoutMs: 10_000, what: 'narrow’s only slot taken' });
      const second = client.chat.completions.create({ model: 'narrow', messages: USER, max_tokens: 2 }).withResponse();
      await waitFor(async () => /viiwork_queue_depth\{model="narrow",workload="chat"\} 1\b/.test(await (await request(`${g.url}/metrics`)).body.text()), {
        timeoutMs: 10_000,
        what: 'the second request queued on G',
      });
      const err = await rejection(client.chat.completions.create({ model: 'narrow', messages: USER }));
      assert.ok(err instanceof RateLimitError, String(err));
      assert.equal(err.status, 429);
      assert.equal(err.code, 'queue_full');
      assert.equal(err.headers?.get('retry-after'), '2');
      assert.equal(narrowEng.heldCount, 1, 'the refused request never reached the engine');
      narrowEng.hold(false);
      const [r1, r2] = await Promise.all([first, second]);
      assert.equal(r1.data.choices[0].message.content, fakeText(1));
      assert.equal(r2.data.choices[0].message.content, fakeText(2));
      assert.equal(r2.response.headers.get('x-viiwork-route'), 'queued');
      assertHop(r2.response.headers);
    } finally {
      narrowEng.hold(false);
    }
  });

  it('an engine failure before its first byte, with no other route, is an APIError 502 carrying the engine’s message', async () => {
    chatEng.resetCounters();
    chatEng.failNext(500, 'CUDA error: out of memory on device 0');
    const err = await rejection(client.chat.completions.create({ model: 'chat-model', messages: USER }));
    assert.ok(err instanceof InternalServerError, String(err));
    assert.equal(err.status, 502);
    assert.equal(err.code, 'engine_failed');
    assert.match(err.message, /CUDA error: out of memory on device 0/);
    // The executor's 502 already says it; the entry node must not say it again.
    assert.equal(err.message.split('the engine failed before answering').length - 1, 1, err.message);
    assert.equal(chatEng.count('/v1/chat/completions'), 1);
  });

  it('aborting a stream mid-way through the hop cancels the engine’s request and frees X’s only slot for the next request', async () => {
    const abortedBefore = narrowEng.aborted;
    const ac = new AbortController();
    const stream = await client.chat.completions.create({ model: 'narrow', messages: USER, stream: true }, { signal: ac.signal });
    let text = '';
    try {
      for await (const chunk of stream) {
        text += chunk.choices[0]?.delta?.content ?? '';
        if (text.length > 0) ac.abort();
      }
    } catch (err) {
      assert.ok(err instanceof APIUserAbortError || (err as Error).name === 'AbortError', String(err));
    }
    assert.ok(text.length > 0 && fakeText(50).startsWith(text), `a prefix of the engine’s text: ${JSON.stringify(text)}`);
    await narrowEng.waitFor((e) => e.aborted === abortedBefore + 1 && e.inFlight === 0, 10_000, 'the engine request cancelled');
    await waitFor(
      async () => {
        const cap = await getJson(`${x.url}/v1/capacity`);
        return cap.models.find((m: any) => m.name === 'narrow').busy === 0;
      },
      { timeoutMs: 10_000, what: 'X’s narrow slot free' },
    );
    await waitFor(
      async () => {
        const fleet = await getJson(`${g.url}/v1/fleet/capacity`);
        const h = fleet.models.find((m: any) => m.name === 'narrow').hosts.find((y: any) => y.node === 'X');
        return h.fresh && h.free === 1;
      },
      { timeoutMs: 10_000, what: 'G sees X’s narrow slot free' },
    );
    const { data, response } = await client.chat.completions.create({ model: 'narrow', messages: USER, max_tokens: 2 }).withResponse();
    assert.equal(data.choices[0].message.content, fakeText(2));
    assertHop(response.headers);
    assert.notEqual(response.headers.get('x-viiwork-route'), 'queued', 'the slot was free: the request did not wait');
  });
});
