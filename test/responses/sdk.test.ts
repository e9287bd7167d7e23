/**
 * The Responses translation as the official openai SDK sees it. A tiny
 * server in this file plays a node in front of a chat-only engine: it takes
 * POST /v1/responses, translates the body with responsesToChat, answers from
 * a scripted chat completion (or chat SSE chunks, sent through the stream
 * translator as raw bytes cut at awkward places) and records every chat body
 * the "engine" received. This is the shape the node wires in.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, beforeEach, describe, it } from 'node:test';
import OpenAI from 'openai';
import { zodTextFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import type { ChatRequest } from '../../src/chat/index.ts';
import { chatToResponse, ResponsesStreamTranslator, responsesToChat } from '../../src/responses/index.ts';
import { TEXT_STREAM_EVENTS } from './events.ts';

/** What the fake engine answers: a whole completion, or stream chunks (optionally failing after them). */
type Answer = { json: unknown } | { chunks: unknown[]; fail?: string; noDone?: boolean };

let script: (chat: ChatRequest, n: number) => Answer;
const seen: ChatRequest[] = [];

function completion(message: Record<string, unknown>, finish = 'stop', usage: Record<string, unknown> = { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 }) {
  return { id: 'chatcmpl-1', object: 'chat.completion', created: 1, model: 'engine-model', choices: [{ index: 0, message: { role: 'assistant', ...message }, finish_reason: finish }], usage };
}

const chunk = (delta: Record<string, unknown>, finish: string | null = null) => ({
  id: 'chatcmpl-1',
  object: 'chat.completion.chunk',
  created: 1,
  model: 'engine-model',
  choices: [{ index: 0, delta, finish_reason: finish }],
});
const usageChunk = (p: number, c: number) => ({ id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'engine-model', choices: [], usage: { prompt_tokens: p, completion_tokens: c, total_tokens: p + c, prompt_tokens_details: { cached_tokens: 2 } } });

/** The chat SSE text an engine would send, cut into 7-byte pieces so events and UTF-8 characters straddle writes. */
function chatSseBytes(chunks: unknown[], done: boolean): Buffer[] {
  const text = chunks.map((c) => `data: ${JSON.stringify(c)}\n\n`).join('') + (done ? 'data: [DONE]\n\n' : '');
  const all = Buffer.from(text, 'utf8');
  const pieces: Buffer[] = [];
  for (let i = 0; i < all.length; i += 7) pieces.push(all.subarray(i, i + 7));
  return pieces;
}

async function readJson(req: http.IncomingMessage): Promise<unknown> {
  const parts: Buffer[] = [];
  for await (const p of req) parts.push(p as Buffer);
  return JSON.parse(Buffer.concat(parts).toString('utf8'));
}

function handler(req: http.IncomingMessage, res: http.ServerResponse): void {
  void (async () => {
    if (req.method !== 'POST' || req.url !== '/v1/responses') {
      res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: 'no such endpoint', type: 'invalid_request_error', code: 'not_found' } }));
      return;
    }
    const t = responsesToChat(await readJson(req));
    if (!t.ok) {
      const { message, code, param } = t.error;
      res.writeHead(t.error.status, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message, type: 'invalid_request_error', code, param } }));
      return;
    }
    seen.push(t.chat);
    const answer = script(t.chat, seen.length);
    if (!t.chat.stream) {
      if (!('json' in answer)) throw new Error('script gave chunks for a non-streamed request');
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(chatToResponse(answer.json, t.meta)));
      return;
    }
    if (!('chunks' in answer)) throw new Error('script gave a completion for a streamed request');
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    const tr = new ResponsesStreamTranslator(t.meta);
    for (const piece of chatSseBytes(answer.chunks, !answer.fail && !answer.noDone)) {
      const out = tr.pushBytes(piece);
      if (out) res.write(out);
    }
    res.end(answer.fail ? tr.error(answer.fail) : tr.end());
  })().catch((err) => {
    res.destroy(err as Error);
  });
}

describe('the Responses API through the official openai SDK, translated for a chat-only engine', () => {
  let server: http.Server;
  let client: OpenAI;
  let baseURL: string;

  before(async () => {
    server = http.createServer(handler);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    baseURL = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
    client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0 });
  });
  after(() => new Promise<void>((r) => server.close(() => r())));
  beforeEach(() => {
    seen.length = 0;
  });

  it('responses.create answers plain text, with output_text, usage and a resp_ id', async () => {
    script = () => ({ json: completion({ content: 'Hello from the mesh.' }) });
    const r = await client.responses.create({ model: 'm1', instructions: 'Be brief.', input: 'Say hello.', temperature: 0.2, max_output_tokens: 50 });
    assert.equal(r.object, 'response');
    assert.match(r.id, /^resp_[0-9a-f]{48}$/);
    assert.equal(r.status, 'completed');
    assert.equal(r.output_text, 'Hello from the mesh.');
    assert.equal(r.output[0].type, 'message');
    assert.deepEqual(r.usage, { input_tokens: 11, input_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 }, output_tokens: 7, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 18 });
    assert.equal(r.instructions, 'Be brief.');
    assert.equal(r.temperature, 0.2);
    assert.equal(r.max_output_tokens, 50);
    assert.deepEqual(seen[0].messages, [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Say hello.' },
    ]);
    assert.equal(seen[0].max_tokens, 50);
    assert.equal(seen[0].stream, undefined);
  });

  it('a function tool round trip: a function_call first, then text after the function_call_output', async () => {
    script = (chat, n) => {
      if (n === 1) return { json: completion({ content: null, tool_calls: [{ id: 'call_abc', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] }, 'tool_calls') };
      return { json: completion({ content: `It is ${(chat.messages.at(-1) as { content: string }).content} in Paris.` }) };
    };
    const tools: OpenAI.Responses.Tool[] = [
      { type: 'function', name: 'get_weather', description: 'weather now', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }, strict: false },
    ];
    const first = await client.responses.create({ model: 'm1', input: 'Weather in Paris?', tools, tool_choice: 'auto' });
    const call = first.output.find((o): o is OpenAI.Responses.ResponseFunctionToolCall => o.type === 'function_call');
    assert.ok(call, JSON.stringify(first.output));
    assert.equal(call.name, 'get_weather');
    assert.equal(call.call_id, 'call_abc');
    assert.deepEqual(JSON.parse(call.arguments), { city: 'Paris' });
    assert.equal(first.output_text, '');
    assert.deepEqual(seen[0].tools, [{ type: 'function', function: { name: 'get_weather', description: 'weather now', parameters: tools[0].type === 'function' ? tools[0].parameters : null, strict: false } }]);
    assert.equal(seen[0].tool_choice, 'auto');

    const second = await client.responses.create({
      model: 'm1',
      tools,
      input: [{ role: 'user', content: 'Weather in Paris?' }, ...first.output, { type: 'function_call_output', call_id: call.call_id, output: 'sunny, 21°C' }] as OpenAI.Responses.ResponseInput,
    });
    assert.equal(second.output_text, 'It is sunny, 21°C in Paris.');
    assert.deepEqual(seen[1].messages, [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_abc', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_abc', content: 'sunny, 21°C' },
    ]);
  });

  it('text.format json_schema reaches the engine as response_format, and responses.parse parses the answer', async () => {
    script = () => ({ json: completion({ content: '{"name":"Ada","age":36}' }) });
    const format = zodTextFormat(z.object({ name: z.string(), age: z.number() }), 'person');
    const r = await client.responses.create({ model: 'm1', input: 'Who?', text: { format } });
    assert.deepEqual(JSON.parse(r.output_text), { name: 'Ada', age: 36 });
    assert.deepEqual(seen[0].response_format, { type: 'json_schema', json_schema: { name: 'person', schema: format.schema, strict: true } });
    assert.deepEqual(r.text?.format?.type, 'json_schema');
    const parsed = await client.responses.parse({ model: 'm1', input: 'Who?', text: { format } });
    assert.deepEqual(parsed.output_parsed, { name: 'Ada', age: 36 });
  });

  it('a completion cut by max_output_tokens is an incomplete response', async () => {
    script = () => ({ json: completion({ content: 'Once upon a' }, 'length') });
    const r = await client.responses.create({ model: 'm1', input: 'Tell a story.', max_output_tokens: 3 });
    assert.equal(r.status, 'incomplete');
    assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
    assert.equal(r.output_text, 'Once upon a');
  });

  it('responses.stream: text deltas reassemble into output_text and the final response carries usage', async () => {
    const words = ['Héllo', ', ', 'wörld', ' 🌍', '!'];
    script = (chat) => {
      assert.deepEqual(chat.stream_options, { include_usage: true });
      return { chunks: [chunk({ role: 'assistant', content: '' }), ...words.map((w) => chunk({ content: w })), chunk({}, 'stop'), usageChunk(9, 5)] };
    };
    const stream = client.responses.stream({ model: 'm1', input: 'Greet the world.' });
    const deltas: string[] = [];
    const snapshots: string[] = [];
    stream.on('response.output_text.delta', (e) => {
      deltas.push(e.delta);
      snapshots.push(e.snapshot);
    });
    const final = await stream.finalResponse();
    assert.deepEqual(deltas, words);
    assert.equal(snapshots.at(-1), words.join(''));
    assert.equal(final.output_text, 'Héllo, wörld 🌍!');
    assert.equal(final.status, 'completed');
    assert.equal(final.model, 'engine-model');
    assert.deepEqual(final.usage, { input_tokens: 9, input_tokens_details: { cached_tokens: 2, cache_write_tokens: 0 }, output_tokens: 5, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 14 });
  });

  it('responses.stream: function call arguments reassemble, two calls in one turn', async () => {
    script = () => ({
      chunks: [
        chunk({ role: 'assistant', tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '' } }] }),
        chunk({ tool_calls: [{ index: 0, function: { arguments: '{"ci' } }] }),
        chunk({ tool_calls: [{ index: 0, function: { arguments: 'ty":"Oslo"}' } }] }),
        chunk({ tool_calls: [{ index: 1, id: 'call_2', type: 'function', function: { name: 'get_time', arguments: '{"tz":' } }] }),
        chunk({ tool_calls: [{ index: 1, function: { arguments: '"CET"}' } }] }),
        chunk({}, 'tool_calls'),
        usageChunk(20, 12),
      ],
    });
    const stream = client.responses.stream({
      model: 'm1',
      input: 'Weather and time in Oslo?',
      tools: [
        { type: 'function', name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } }, strict: false },
        { type: 'function', name: 'get_time', parameters: { type: 'object', properties: { tz: { type: 'string' } } }, strict: false },
      ],
    });
    const argDeltas: Record<string, string> = {};
    const argsDone: string[] = [];
    stream.on('response.function_call_arguments.delta', (e) => (argDeltas[e.item_id] = (argDeltas[e.item_id] ?? '') + e.delta));
    stream.on('response.function_call_arguments.done', (e) => argsDone.push(`${e.name} ${e.arguments}`));
    const final = await stream.finalResponse();
    const calls = final.output.filter((o) => o.type === 'function_call');
    assert.deepEqual(
      calls.map((c) => [c.call_id, c.name, JSON.parse(c.arguments)]),
      [
        ['call_1', 'get_weather', { city: 'Oslo' }],
        ['call_2', 'get_time', { tz: 'CET' }],
      ],
    );
    assert.deepEqual(Object.values(argDeltas), ['{"city":"Oslo"}', '{"tz":"CET"}']);
    assert.deepEqual(argsDone, ['get_weather {"city":"Oslo"}', 'get_time {"tz":"CET"}']);
    assert.equal(final.usage?.total_tokens, 32);
  });

  it('the raw event stream is the documented sequence with sequence_numbers counting up from 0', async () => {
    script = () => ({ chunks: [chunk({ role: 'assistant', content: 'a' }), chunk({ content: 'b' }), chunk({}, 'stop'), usageChunk(3, 2)] });
    const events = await client.responses.create({ model: 'm1', input: 'x', stream: true });
    const got: { type: string; sequence_number: number }[] = [];
    for await (const e of events) got.push(e);
    assert.deepEqual(got.map((e) => e.type), TEXT_STREAM_EVENTS(2));
    assert.deepEqual(
      got.map((e) => e.sequence_number),
      got.map((_, i) => i),
    );
  });

  it('reasoning_content from the engine streams as a reasoning item before the message', async () => {
    script = () => ({ chunks: [chunk({ reasoning_content: 'think ' }), chunk({ reasoning_content: 'hard' }), chunk({ content: '42' }), chunk({}, 'stop')] });
    const final = await client.responses.stream({ model: 'm1', input: 'answer?', reasoning: { effort: 'low' } }).finalResponse();
    assert.equal(seen[0].reasoning_effort, 'low');
    assert.deepEqual(
      final.output.map((o) => o.type),
      ['reasoning', 'message'],
    );
    const r = final.output[0] as OpenAI.Responses.ResponseReasoningItem;
    assert.equal(r.content?.[0].text, 'think hard');
    assert.equal(final.output_text, '42');
  });

  it('a failure mid-stream reaches the SDK as an APIError carrying the message', async () => {
    script = () => ({ chunks: [chunk({ content: 'partial' })], fail: 'the engine failed mid-stream: socket hang up' });
    const stream = client.responses.stream({ model: 'm1', input: 'x' });
    const texts: string[] = [];
    stream.on('response.output_text.delta', (e) => texts.push(e.delta));
    await assert.rejects(stream.finalResponse(), (err: unknown) => {
      assert.ok(err instanceof OpenAI.APIError, String(err));
      assert.match((err as Error).message, /the engine failed mid-stream: socket hang up/);
      return true;
    });
    assert.deepEqual(texts, ['partial']);
  });

  it('an engine stream that ends without finishing is a failure, not a silent truncation', async () => {
    script = () => ({ chunks: [chunk({ content: 'half' })], noDone: true });
    await assert.rejects(client.responses.stream({ model: 'm1', input: 'x' }).finalResponse(), /ended before the response was complete/);
  });

  it('previous_response_id is a 400 BadRequestError that says to send the history in input', async () => {
    await assert.rejects(client.responses.create({ model: 'm1', input: 'again', previous_response_id: 'resp_123' }), (err: unknown) => {
      assert.ok(err instanceof OpenAI.BadRequestError);
      assert.match((err as Error).message, /send the whole history in `input`/);
      return true;
    });
    assert.equal(seen.length, 0);
  });

  it('a built-in tool is left out of what the engine sees; a tool_choice forcing it is a 400 BadRequestError naming its type', async () => {
    script = () => ({ json: completion({ content: 'no search here' }) });
    const r = await client.responses.create({ model: 'm1', input: 'search', tools: [{ type: 'web_search' }, { type: 'function', name: 'f', parameters: { type: 'object', properties: {} }, strict: false }] });
    assert.equal(r.output_text, 'no search here');
    assert.deepEqual(seen[0].tools?.map((t) => t.function.name), ['f']);
    await assert.rejects(client.responses.create({ model: 'm1', input: 'search', tools: [{ type: 'web_search' }], tool_choice: { type: 'web_search' } as never }), (err: unknown) => {
      assert.ok(err instanceof OpenAI.BadRequestError);
      assert.match((err as Error).message, /built-in tool of type "web_search"/);
      return true;
    });
  });
});
