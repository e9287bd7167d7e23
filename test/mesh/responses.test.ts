/**
 * Issue 10, acceptance 1: the Responses API through a forward. To a
 * chat-only engine the executor translates (the official SDK's create and
 * stream work); to an engine whose target lists `responses` the request
 * passes untouched.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { startFakeEngine, type FakeEngine } from '../fakes/fake-engine.ts';
import { startMeshNode, stopAll, waitConverged, waitModelOn, type MeshNode } from '../helpers/mesh.ts';
import { waitFor } from '../fakes/wait.ts';

const IP = (n: number) => `127.0.28.${n}`;

describe('the Responses API across the mesh', () => {
  let chatOnly: FakeEngine;
  let native: FakeEngine;
  let a: MeshNode, c: MeshNode;
  let client: OpenAI;
  before(async () => {
    chatOnly = await startFakeEngine({ name: 'chat-only', outputTokens: 4 });
    native = await startFakeEngine({ name: 'native' });
    a = await startMeshNode({ name: 'A', ip: IP(1) });
    c = await startMeshNode({
      name: 'C',
      ip: IP(3),
      seeds: [a.gossip],
      models: [
        { name: 'chatty', engine: 'openai', url: chatOnly.url, parallel: 2 },
        { name: 'modern', engine: 'openai', url: native.url, parallel: 2, workloads: ['chat', 'responses'] },
      ],
    });
    await waitConverged([a, c]);
    await waitModelOn(a, 'chatty', ['C']);
    await waitModelOn(a, 'modern', ['C']);
    client = new OpenAI({ baseURL: `${a.url}/v1`, apiKey: 'none', maxRetries: 0 });
  });
  after(async () => {
    await stopAll([a, c]);
    await chatOnly?.close();
    await native?.close();
  });

  it('responses.create through a forward to a chat-only engine: the engine gets a chat completion, the client a response', async () => {
    chatOnly.resetCounters();
    const r = await client.responses.create({ model: 'chatty', instructions: 'be brief', input: 'hello there' });
    assert.equal(r.object, 'response');
    assert.equal(r.status, 'completed');
    assert.ok(r.output_text.length > 0);
    assert.ok(r.usage && r.usage.input_tokens > 0);
    const sent = chatOnly.bodiesFor('/v1/chat/completions')[0];
    assert.equal(sent.model, 'chatty');
    assert.deepEqual(sent.messages[0], { role: 'system', content: 'be brief' });
    assert.equal(chatOnly.count('/v1/responses'), 0);
  });

  it('responses.stream through a forward: text deltas reassemble and the final response carries usage', async () => {
    const stream = client.responses.stream({ model: 'chatty', input: 'stream please' });
    let deltas = '';
    for await (const ev of stream) if (ev.type === 'response.output_text.delta') deltas += ev.delta;
    const final = await stream.finalResponse();
    assert.ok(deltas.length > 0);
    assert.equal(final.output_text, deltas);
    assert.ok(final.usage && final.usage.output_tokens > 0);
  });

  it('a function tool round trip through a forward: the call comes back as a function_call item, its output goes back as a tool message', async () => {
    chatOnly.resetCounters();
    const tools = [{ type: 'function' as const, name: 'weather', description: 'weather in a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }, strict: false }];
    const first = await client.responses.create({ model: 'chatty', input: 'weather in Oslo?', tools });
    const call = first.output.find((o) => o.type === 'function_call') as { call_id: string; name: string; arguments: string } | undefined;
    assert.ok(call, JSON.stringify(first.output));
    assert.equal(call.name, 'weather');
    assert.deepEqual(JSON.parse(call.arguments), { city: 'Oslo' });
    const second = await client.responses.create({
      model: 'chatty',
      tools,
      input: [{ role: 'user', content: 'weather in Oslo?' }, { type: 'function_call', call_id: call.call_id, name: call.name, arguments: call.arguments }, { type: 'function_call_output', call_id: call.call_id, output: '{"temp":3}' }],
    });
    assert.ok(second.output_text.length > 0);
    const sent = chatOnly.bodiesFor('/v1/chat/completions')[1];
    assert.equal(sent.messages.at(-1).role, 'tool');
    assert.equal(sent.messages.at(-1).tool_call_id, call.call_id);
  });

  it('streams a function call: its arguments reassemble', async () => {
    const stream = client.responses.stream({ model: 'chatty', input: 'weather?', tools: [{ type: 'function', name: 'weather', parameters: { type: 'object', properties: {} }, strict: false }] });
    let args = '';
    for await (const ev of stream) if (ev.type === 'response.function_call_arguments.delta') args += ev.delta;
    const final = await stream.finalResponse();
    assert.equal(args, '{"city":"Oslo"}');
    const call = final.output.find((o) => o.type === 'function_call') as { arguments: string } | undefined;
    assert.equal(call?.arguments, '{"city":"Oslo"}');
  });

  it('text.format json_schema reaches the engine as response_format and the answer parses', async () => {
    chatOnly.resetCounters();
    const r = await client.responses.create({
      model: 'chatty',
      input: 'give me json',
      text: { format: { type: 'json_schema', name: 'answer', schema: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'], additionalProperties: false }, strict: true } },
    });
    assert.deepEqual(JSON.parse(r.output_text), { ok: true });
    assert.equal(chatOnly.bodiesFor('/v1/chat/completions')[0].response_format.type, 'json_schema');
  });

  it('models.retrieve finds an alias', async () => {
    const set = await fetch(`${c.url}/v1/aliases/talker`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ target: 'chatty', fallbacks: [] }) });
    assert.equal(set.status, 200);
    await waitFor(async () => {
      try {
        return (await client.models.retrieve('talker')).id === 'talker';
      } catch {
        return false;
      }
    }, { what: 'alias listed on A', timeoutMs: 10_000 });
  });

  it('passes the request untouched to an engine that serves the Responses API natively', async () => {
    native.resetCounters();
    const r = await client.responses.create({ model: 'modern', input: 'as is', temperature: 1 });
    assert.equal(r.output_text, 'native native');
    const got = native.requests.find((q) => q.path === '/v1/responses')!;
    assert.deepEqual(got.json, { model: 'modern', input: 'as is', temperature: 1 });
    assert.equal(native.count('/v1/chat/completions'), 0);
  });

  it('stored state, and a tool_choice forcing a built-in tool, are a clear 400 from wherever the request entered', async () => {
    await assert.rejects(client.responses.create({ model: 'chatty', input: 'x', previous_response_id: 'resp_1' }), (e: any) => e.status === 400 && /input/.test(e.message));
    await assert.rejects(client.responses.create({ model: 'chatty', input: 'x', tools: [{ type: 'web_search' } as any], tool_choice: { type: 'web_search' } as any }), (e: any) => e.status === 400 && /web_search/.test(e.message));
  });

  it('built-in tools are left out and named in X-Viiwork-Omitted-Tools, which the entry node passes on', async () => {
    chatOnly.resetCounters();
    const { data, response } = await client.responses.create({ model: 'chatty', input: 'x', tools: [{ type: 'web_search' } as any, { type: 'file_search', vector_store_ids: [] } as any] }).withResponse();
    assert.equal(data.status, 'completed');
    assert.equal(response.headers.get('x-viiwork-omitted-tools'), 'web_search, file_search');
    assert.equal(response.headers.get('x-viiwork-node'), 'C');
    assert.equal(chatOnly.bodiesFor('/v1/chat/completions')[0].tools, undefined);
  });
});
