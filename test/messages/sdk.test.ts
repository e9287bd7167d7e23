/**
 * Issue 18: Anthropic's Messages API through one node and the official
 * @anthropic-ai/sdk, for an engine that speaks only chat completions (a
 * scripted fake): create, stream, tools both ways, count_tokens, and the
 * SDK's error classes from Anthropic-shaped errors. The key comes as
 * `x-api-key`, as the SDK sends it.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import { request } from 'undici';
import { startFakeEngine, type FakeEngine } from '../fakes/fake-engine.ts';
import { startNode, type TestNode } from '../helpers/node.ts';

const KEY = 'sk-messages-sdk';
const MODEL = 'claude-local';

type Answer = { text: string } | { call: { id?: string; name: string; arguments: string } } | undefined;
let script: (json: any) => Answer = () => undefined;

describe('the Messages API through the official Anthropic SDK, translated for a chat-only engine', () => {
  let engine: FakeEngine;
  let native: FakeEngine;
  let t: TestNode;
  let client: Anthropic;

  before(async () => {
    engine = await startFakeEngine({ name: 'chat-only', model: MODEL, script: (json) => script(json) });
    native = await startFakeEngine({ name: 'native', model: 'native-model' });
    process.env.MESSAGES_SDK_KEYS = KEY;
    t = await startNode({
      node: { name: 'm1' },
      api: { keys_env: 'MESSAGES_SDK_KEYS' },
      models: [
        { name: MODEL, engine: 'openai', url: engine.url, parallel: 2, context: 4096 },
        { name: 'native-model', engine: 'openai', url: native.url, parallel: 1, workloads: ['chat', 'messages'] },
      ],
      aliases: { claude: MODEL },
    });
    client = new Anthropic({ baseURL: t.url, apiKey: KEY, maxRetries: 0 });
  });
  after(async () => {
    await t?.stop();
    await engine?.close();
    await native?.close();
  });
  beforeEach(() => {
    engine.resetCounters();
    script = () => ({ text: 'Hello from a chat engine.' });
  });
  const sent = () => engine.bodiesFor('/v1/chat/completions');

  it('messages.create: a message with text, end_turn and usage; the engine got a chat completion', async () => {
    // The SDK refuses max_tokens this large without a stream unless a timeout is set, as Claude Code's fallback does.
    const m = await client.messages.create({ model: MODEL, max_tokens: 32000, system: [{ type: 'text', text: 'be brief', cache_control: { type: 'ephemeral' } }], messages: [{ role: 'user', content: 'hi' }] }, { timeout: 60_000 });
    assert.equal(m.type, 'message');
    assert.equal(m.role, 'assistant');
    assert.equal(m.model, MODEL);
    assert.deepEqual(m.content, [{ type: 'text', text: 'Hello from a chat engine.' }]);
    assert.equal(m.stop_reason, 'end_turn');
    assert.ok(m.usage.input_tokens > 0);
    assert.ok(m.usage.output_tokens > 0);
    const body = sent()[0];
    assert.deepEqual(body.messages, [
      { role: 'system', content: 'be brief' },
      { role: 'user', content: 'hi' },
    ]);
    // 32000 is more than the target's context: the engine is asked for what fits.
    assert.equal(body.max_tokens, 4096);
  });

  it('messages.stream: text deltas reassemble; the final message has its stop reason and usage', async () => {
    const stream = client.messages.stream({ model: MODEL, max_tokens: 100, messages: [{ role: 'user', content: 'stream please' }] });
    let text = '';
    const kinds: string[] = [];
    stream.on('streamEvent', (ev) => kinds.push(ev.type));
    stream.on('text', (d) => (text += d));
    const final = await stream.finalMessage();
    assert.equal(text, 'Hello from a chat engine.');
    assert.deepEqual(final.content, [{ type: 'text', text }]);
    assert.equal(final.stop_reason, 'end_turn');
    assert.ok(final.usage.output_tokens > 0);
    assert.equal(kinds[0], 'message_start');
    assert.equal(kinds.at(-1), 'message_stop');
    assert.ok(kinds.includes('content_block_stop'));
    assert.equal(sent()[0].stream, true);
  });

  it('tools: a call comes back as tool_use (whole and streamed), and its tool_result goes back as a tool message', async () => {
    const tools = [{ name: 'weather', description: 'weather in a city', input_schema: { type: 'object' as const, properties: { city: { type: 'string' } }, required: ['city'] } }];
    script = (json) => (json.messages.at(-1).role === 'tool' ? { text: `It is ${json.messages.at(-1).content}.` } : { call: { id: 'call_w1', name: 'weather', arguments: '{"city":"Oslo"}' } });
    const first = await client.messages.create({ model: MODEL, max_tokens: 100, tools, messages: [{ role: 'user', content: 'weather in Oslo?' }] });
    assert.equal(first.stop_reason, 'tool_use');
    const use = first.content.find((b) => b.type === 'tool_use');
    assert.ok(use && use.type === 'tool_use');
    assert.deepEqual(use.input, { city: 'Oslo' });
    assert.equal(use.name, 'weather');
    assert.deepEqual(sent()[0].tools, [{ type: 'function', function: { name: 'weather', description: 'weather in a city', parameters: tools[0].input_schema } }]);

    const streamed = await client.messages.stream({ model: MODEL, max_tokens: 100, tools, messages: [{ role: 'user', content: 'weather in Oslo?' }] }).finalMessage();
    const suse = streamed.content.find((b) => b.type === 'tool_use');
    assert.ok(suse && suse.type === 'tool_use');
    assert.deepEqual(suse.input, { city: 'Oslo' });
    assert.equal(streamed.stop_reason, 'tool_use');

    const second = await client.messages.create({
      model: MODEL,
      max_tokens: 100,
      tools,
      messages: [
        { role: 'user', content: 'weather in Oslo?' },
        { role: 'assistant', content: first.content },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: [{ type: 'text', text: '3 degrees' }] }, { type: 'text', text: 'thanks' }] },
      ],
    });
    const body = sent().at(-1);
    assert.deepEqual(body.messages.slice(1), [
      { role: 'assistant', content: null, tool_calls: [{ id: use.id, type: 'function', function: { name: 'weather', arguments: '{"city":"Oslo"}' } }] },
      { role: 'tool', tool_call_id: use.id, content: '3 degrees' },
      { role: 'user', content: 'thanks' },
    ]);
    void second;
  });

  it('tool_choice: any is required, a named tool is forced, disable_parallel_tool_use turns parallel calls off', async () => {
    const tools = [{ name: 'a', input_schema: { type: 'object' as const } }, { name: 'b', input_schema: { type: 'object' as const } }];
    await client.messages.create({ model: MODEL, max_tokens: 10, tools, tool_choice: { type: 'any', disable_parallel_tool_use: true }, messages: [{ role: 'user', content: 'x' }] });
    await client.messages.create({ model: MODEL, max_tokens: 10, tools, tool_choice: { type: 'tool', name: 'b' }, messages: [{ role: 'user', content: 'x' }] });
    const [any, forced] = sent();
    assert.equal(any.tool_choice, 'required');
    assert.equal(any.parallel_tool_calls, false);
    assert.deepEqual(forced.tool_choice, { type: 'function', function: { name: 'b' } });
  });

  it('count_tokens answers input_tokens without reaching the engine', async () => {
    const { data: r, response } = await client.messages.countTokens({ model: MODEL, system: 'you are a counter', messages: [{ role: 'user', content: 'count these words please' }] }).withResponse();
    assert.ok(r.input_tokens > 5 && r.input_tokens < 100, String(r.input_tokens));
    assert.equal(response.headers.get('x-viiwork-node'), t.node.name, 'the answer names the node that counted');
    assert.equal(engine.count('/v1/chat/completions'), 0);
  });

  it("errors are Anthropic's shape and the SDK raises its own classes", async () => {
    await assert.rejects(client.messages.create({ model: 'no-such-model', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] }), (err: unknown) => {
      assert.ok(err instanceof Anthropic.NotFoundError, String(err));
      assert.match((err as Error).message, /no-such-model/);
      return true;
    });
    await assert.rejects(new Anthropic({ baseURL: t.url, apiKey: 'wrong', maxRetries: 0 }).messages.create({ model: MODEL, max_tokens: 5, messages: [{ role: 'user', content: 'x' }] }), (err: unknown) => {
      assert.ok(err instanceof Anthropic.AuthenticationError, String(err));
      return true;
    });
    await assert.rejects(client.messages.create({ model: MODEL, max_tokens: 5, messages: 'not a list' as never }), (err: unknown) => {
      assert.ok(err instanceof Anthropic.BadRequestError, String(err));
      assert.match((err as Error).message, /messages must be a list/);
      return true;
    });
    // Anthropic's own tools are left out; forcing one is the one 400 an agent's tool list can get.
    await assert.rejects(
      client.messages.create({ model: MODEL, max_tokens: 5, tools: [{ type: 'web_search_20250305', name: 'web_search' }], tool_choice: { type: 'tool', name: 'web_search' }, messages: [{ role: 'user', content: 'x' }] }),
      (err: unknown) => {
        assert.ok(err instanceof Anthropic.BadRequestError, String(err));
        return true;
      },
    );
    // x-api-key is a key on the Messages API only; the OpenAI paths keep Bearer and their own error shape.
    const chat = await request(`${t.url}/v1/chat/completions`, { method: 'POST', headers: { 'x-api-key': KEY, 'content-type': 'application/json' }, body: JSON.stringify({ model: MODEL, messages: [] }) });
    assert.equal(chat.statusCode, 401);
    assert.equal(((await chat.body.json()) as { error: { code: string } }).error.code, 'invalid_api_key');
    const raw = await request(`${t.url}/v1/messages?beta=true`, { method: 'POST', headers: { 'x-api-key': KEY, 'content-type': 'application/json' }, body: '{"model":' });
    assert.equal(raw.statusCode, 400);
    const doc = (await raw.body.json()) as { type: string; error: { type: string; message: string } };
    assert.equal(doc.type, 'error');
    assert.equal(doc.error.type, 'invalid_request_error');
    assert.equal(engine.count('/v1/chat/completions'), 0);
  });

  it('an error of the engine itself comes back in Anthropic shape with its words', async () => {
    engine.failNext(400);
    await assert.rejects(client.messages.create({ model: MODEL, max_tokens: 5, messages: [{ role: 'user', content: 'x' }] }), (err: unknown) => {
      assert.ok(err instanceof Anthropic.BadRequestError, String(err));
      assert.equal(((err as InstanceType<typeof Anthropic.BadRequestError>).error as { type?: string })?.type, 'error');
      return true;
    });
  });

  it("Anthropic's own tools are left out and named in X-Viiwork-Omitted-Tools; fields the engine cannot honour are accepted", async () => {
    const { response } = await client.messages
      .create({
        model: MODEL,
        max_tokens: 10,
        thinking: { type: 'enabled', budget_tokens: 1024 },
        metadata: { user_id: '{"session_id":"s1"}' },
        stop_sequences: ['END'],
        tools: [{ type: 'web_search_20250305', name: 'web_search' }, { name: 'local', input_schema: { type: 'object' as const }, cache_control: { type: 'ephemeral' } }],
        messages: [{ role: 'user', content: [{ type: 'text', text: 'x', cache_control: { type: 'ephemeral' } }] }],
      })
      .withResponse();
    assert.equal(response.headers.get('x-viiwork-omitted-tools'), 'web_search');
    const body = sent()[0];
    assert.deepEqual(body.tools.map((x: any) => x.function.name), ['local']);
    assert.deepEqual(body.stop, ['END']);
    assert.equal(body.thinking, undefined);
  });

  it('an alias resolves for /v1/messages and count_tokens; the answer names the alias', async () => {
    const { data, response } = await client.messages.create({ model: 'claude', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] }).withResponse();
    assert.equal(data.model, 'claude');
    assert.equal(response.headers.get('x-viiwork-model'), MODEL);
    assert.equal(sent()[0].model, MODEL);
    assert.ok((await client.messages.countTokens({ model: 'claude', messages: [{ role: 'user', content: 'hi' }] })).input_tokens > 0);
  });

  it('a target listing `messages` gets the request as it is, at /v1/messages, streamed or not', async () => {
    native.resetCounters();
    const body = { model: 'native-model', max_tokens: 7, stream: true, system: [{ type: 'text', text: 'x-anthropic-billing-header: cc_version=1;' }], messages: [{ role: 'user', content: 'as is' }] };
    const text = JSON.stringify(body);
    const r = await request(`${t.url}/v1/messages?beta=true`, { method: 'POST', headers: { 'x-api-key': KEY, 'content-type': 'application/json' }, body: text });
    await r.body.text();
    const got = native.requests.filter((q) => q.path === '/v1/messages');
    assert.equal(got.length, 1);
    // Byte for byte: no stream_options spliced in, no hygiene (the engine speaks Messages itself).
    assert.equal(got[0].body.toString('utf8'), text);
    assert.equal(native.count('/v1/chat/completions'), 0);
  });
});
