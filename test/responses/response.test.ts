/** chatToResponse, the stream translator and the chat SSE decoder, without the SDK: exact shapes and event orders. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ChatSseDecoder } from '../../src/chat/index.ts';
import { chatToResponse, chatUsageToResponses, ResponsesStreamTranslator, responsesToChat, type ResponseMeta } from '../../src/responses/index.ts';
import { TEXT_STREAM_EVENTS } from './events.ts';

function meta(req: Record<string, unknown> = {}): ResponseMeta {
  const r = responsesToChat({ model: 'm1', input: 'hi', ...req }, { responseId: 'resp_abc', createdAt: 1000 });
  assert.ok(r.ok);
  return r.meta;
}

const completion = (message: Record<string, unknown>, finish: string | null = 'stop', extra: Record<string, unknown> = {}) => ({
  id: 'chatcmpl-1',
  object: 'chat.completion',
  model: 'engine-m',
  choices: [{ index: 0, message: { role: 'assistant', ...message }, finish_reason: finish }],
  ...extra,
});

/** SSE text → [{event, data}] */
function parseEvents(text: string): { event: string; data: Record<string, any> }[] {
  return text
    .split('\n\n')
    .filter((b) => b.trim() !== '')
    .map((b) => {
      const lines = b.split('\n');
      assert.ok(lines[0].startsWith('event: '), b);
      assert.ok(lines[1].startsWith('data: '), b);
      return { event: lines[0].slice(7), data: JSON.parse(lines[1].slice(6)) };
    });
}

describe('chatToResponse', () => {
  it('a text answer is one completed message with output_text, usage and the echoed request', () => {
    const r = chatToResponse(completion({ content: 'hello' }, 'stop', { usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } }), meta({ instructions: 'sys', temperature: 0.5 }), { completedAt: 1002 });
    assert.deepEqual(r, {
      id: 'resp_abc',
      object: 'response',
      created_at: 1000,
      status: 'completed',
      completed_at: 1002,
      background: false,
      error: null,
      incomplete_details: null,
      instructions: 'sys',
      max_output_tokens: null,
      metadata: {},
      model: 'engine-m',
      output: [{ type: 'message', id: 'msg_abc00', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'hello', annotations: [], logprobs: [] }] }],
      parallel_tool_calls: true,
      previous_response_id: null,
      reasoning: null,
      store: false,
      temperature: 0.5,
      text: { format: { type: 'text' } },
      tool_choice: 'auto',
      tools: [],
      top_p: null,
      truncation: 'disabled',
      usage: { input_tokens: 3, input_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 }, output_tokens: 2, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 5 },
    });
  });

  it('tool calls become function_call items after the message text; a missing call id is made up', () => {
    const r = chatToResponse(
      completion(
        {
          content: 'let me check',
          tool_calls: [
            { id: 'call_1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } },
            { type: 'function', function: { name: 'g', arguments: { b: 2 } } },
          ],
        },
        'tool_calls',
      ),
      meta(),
    );
    assert.equal(r.status, 'completed');
    assert.deepEqual(r.output, [
      { type: 'message', id: 'msg_abc00', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'let me check', annotations: [], logprobs: [] }] },
      { type: 'function_call', id: 'fc_abc01', call_id: 'call_1', name: 'f', arguments: '{"a":1}', status: 'completed' },
      { type: 'function_call', id: 'fc_abc02', call_id: 'call_abc02', name: 'g', arguments: '{"b":2}', status: 'completed' },
    ]);
  });

  it('tool calls alone give no message item', () => {
    const r = chatToResponse(completion({ content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }] }, 'tool_calls'), meta());
    assert.deepEqual(
      r.output.map((o) => o.type),
      ['function_call'],
    );
  });

  it('reasoning_content becomes a reasoning item first; reasoning tokens are counted', () => {
    const r = chatToResponse(
      completion({ content: 'yes', reasoning_content: 'hmm' }, 'stop', { usage: { prompt_tokens: 1, completion_tokens: 4, completion_tokens_details: { reasoning_tokens: 2 }, prompt_tokens_details: { cached_tokens: 1 } } }),
      meta(),
    );
    assert.deepEqual(r.output[0], { type: 'reasoning', id: 'rs_abc00', summary: [], content: [{ type: 'reasoning_text', text: 'hmm' }], status: 'completed' });
    assert.equal(r.output[1].type, 'message');
    assert.deepEqual(r.usage, { input_tokens: 1, input_tokens_details: { cached_tokens: 1, cache_write_tokens: 0 }, output_tokens: 4, output_tokens_details: { reasoning_tokens: 2 }, total_tokens: 5 });
  });

  it('a refusal is a refusal part', () => {
    const r = chatToResponse(completion({ content: null, refusal: 'I cannot' }), meta());
    assert.deepEqual(r.output, [{ type: 'message', id: 'msg_abc00', role: 'assistant', status: 'completed', content: [{ type: 'refusal', refusal: 'I cannot' }] }]);
  });

  it("finish_reason length is an incomplete response only when the client's max_output_tokens cut it", () => {
    const a = chatToResponse(completion({ content: 'cut' }, 'length'), meta({ max_output_tokens: 3 }));
    assert.equal(a.status, 'incomplete');
    assert.deepEqual(a.incomplete_details, { reason: 'max_output_tokens' });
    assert.equal(a.completed_at, null);
    assert.equal(a.output[0].status, 'incomplete');
    // The engine's own limit, or a filter: the response completes (agents retry an incomplete one as failed).
    for (const reason of ['length', 'content_filter']) {
      const b = chatToResponse(completion({ content: 'x' }, reason), meta());
      assert.equal(b.status, 'completed', reason);
      assert.equal(b.incomplete_details, null);
    }
  });

  it('something that is not a chat completion is a failed response that says why, never a throw', () => {
    for (const body of [null, 'x', {}, { choices: [] }, { choices: [{}] }, { error: { message: 'model exploded' } }]) {
      const r = chatToResponse(body, meta());
      assert.equal(r.status, 'failed');
      assert.equal(r.error?.code, 'server_error');
      assert.match(r.error!.message, /not a chat completion/);
      assert.equal(r.model, 'm1');
    }
    assert.match(chatToResponse({ error: { message: 'model exploded' } }, meta()).error!.message, /model exploded/);
  });

  it('usage without numbers counts zeros; no usage leaves it out', () => {
    assert.equal(chatUsageToResponses(undefined), undefined);
    assert.deepEqual(chatUsageToResponses({ prompt_tokens: 'x', completion_tokens: -3 }), { input_tokens: 0, input_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 }, output_tokens: 0, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 0 });
    assert.equal('usage' in chatToResponse(completion({ content: 'a' }), meta()), false);
  });

  it('the user is echoed when the request named one', () => {
    assert.equal(chatToResponse(completion({ content: 'a' }), meta({ user: 'u1' })).user, 'u1');
  });
});

const chunk = (delta: Record<string, unknown>, finish: string | null = null) => ({ object: 'chat.completion.chunk', model: 'engine-m', choices: [{ index: 0, delta, finish_reason: finish }] });

describe('ResponsesStreamTranslator', () => {
  it('text: the whole event sequence, item ids, and a completed response with usage', () => {
    const t = new ResponsesStreamTranslator(meta(), { now: () => 1005 });
    let out = t.start() + t.start();
    out += t.push(chunk({ role: 'assistant', content: '' }));
    out += t.push(chunk({ content: 'Hel' }));
    out += t.push(chunk({ content: 'lo' }, 'stop'));
    out += t.push({ choices: [], usage: { prompt_tokens: 4, completion_tokens: 2, total_tokens: 6 } });
    out += t.push('[DONE]');
    assert.equal(t.finished, true);
    assert.equal(t.push(chunk({ content: 'late' })) + t.end() + t.error('late'), '');
    const ev = parseEvents(out);
    assert.deepEqual(ev.map((e) => e.event), TEXT_STREAM_EVENTS(2));
    for (const [i, e] of ev.entries()) {
      assert.equal(e.data.type, e.event);
      assert.equal(e.data.sequence_number, i);
    }
    assert.equal(ev[0].data.response.status, 'in_progress');
    assert.deepEqual(ev[0].data.response.output, []);
    assert.deepEqual(ev[2].data.item, { type: 'message', id: 'msg_abc00', role: 'assistant', status: 'in_progress', content: [] });
    assert.deepEqual(ev[4].data, { type: 'response.output_text.delta', sequence_number: 4, item_id: 'msg_abc00', output_index: 0, content_index: 0, delta: 'Hel', logprobs: [] });
    assert.equal(ev[6].data.text, 'Hello');
    assert.equal(ev[8].data.item.status, 'completed');
    const done = ev[9].data.response;
    assert.equal(done.status, 'completed');
    assert.equal(done.completed_at, 1005);
    assert.equal(done.model, 'engine-m');
    assert.equal(done.output[0].content[0].text, 'Hello');
    assert.equal(done.usage.total_tokens, 6);
    assert.equal(t.usage?.input_tokens, 4);
  });

  it('tool calls: added with call id and name, argument deltas, done with the whole arguments', () => {
    const t = new ResponsesStreamTranslator(meta());
    let out = t.push(chunk({ tool_calls: [{ index: 0, id: 'call_9', type: 'function', function: { name: 'f', arguments: '{"x"' } }] }));
    out += t.push(chunk({ tool_calls: [{ index: 0, function: { arguments: ':1}' } }] }, 'tool_calls'));
    out += t.end();
    const ev = parseEvents(out);
    assert.deepEqual(
      ev.map((e) => e.event),
      ['response.created', 'response.in_progress', 'response.output_item.added', 'response.function_call_arguments.delta', 'response.function_call_arguments.delta', 'response.function_call_arguments.done', 'response.output_item.done', 'response.completed'],
    );
    assert.deepEqual(ev[2].data.item, { type: 'function_call', id: 'fc_abc00', call_id: 'call_9', name: 'f', arguments: '', status: 'in_progress' });
    assert.deepEqual(ev[5].data, { type: 'response.function_call_arguments.done', sequence_number: 5, item_id: 'fc_abc00', output_index: 0, name: 'f', arguments: '{"x":1}' });
    assert.deepEqual(ev[6].data.item, { type: 'function_call', id: 'fc_abc00', call_id: 'call_9', name: 'f', arguments: '{"x":1}', status: 'completed' });
    assert.equal('usage' in ev[7].data.response, false);
  });

  it('reasoning closes when the answer starts; text then a tool call close in order at the end', () => {
    const t = new ResponsesStreamTranslator(meta());
    let out = t.push(chunk({ reasoning_content: 'r' }));
    out += t.push(chunk({ content: 'a' }));
    out += t.push(chunk({ tool_calls: [{ index: 0, id: 'c', function: { name: 'f', arguments: '{}' } }] }, 'tool_calls'));
    out += t.push('[DONE]');
    const ev = parseEvents(out).slice(2);
    assert.deepEqual(
      ev.map((e) => `${e.event}${e.data.output_index === undefined ? '' : `@${e.data.output_index}`}`),
      [
        'response.output_item.added@0',
        'response.content_part.added@0',
        'response.reasoning_text.delta@0',
        'response.reasoning_text.done@0',
        'response.content_part.done@0',
        'response.output_item.done@0',
        'response.output_item.added@1',
        'response.content_part.added@1',
        'response.output_text.delta@1',
        'response.output_item.added@2',
        'response.function_call_arguments.delta@2',
        'response.output_text.done@1',
        'response.content_part.done@1',
        'response.output_item.done@1',
        'response.function_call_arguments.done@2',
        'response.output_item.done@2',
        'response.completed',
      ],
    );
  });

  it('refusal deltas make a refusal part', () => {
    const t = new ResponsesStreamTranslator(meta());
    const ev = parseEvents(t.push(chunk({ refusal: 'no' })) + t.push(chunk({}, 'stop')) + t.push('[DONE]'));
    assert.ok(ev.some((e) => e.event === 'response.refusal.delta' && e.data.delta === 'no'));
    assert.deepEqual(ev.at(-1)!.data.response.output[0].content, [{ type: 'refusal', refusal: 'no' }]);
  });

  it("finish_reason length ends with response.incomplete when the client's max_output_tokens cut it, else response.completed", () => {
    const t = new ResponsesStreamTranslator(meta({ max_output_tokens: 1 }));
    const ev = parseEvents(t.push(chunk({ content: 'a' }, 'length')) + t.end());
    assert.equal(ev.at(-1)!.event, 'response.incomplete');
    assert.deepEqual(ev.at(-1)!.data.response.incomplete_details, { reason: 'max_output_tokens' });
    assert.equal(ev.at(-1)!.data.response.output[0].status, 'incomplete');
    const u = new ResponsesStreamTranslator(meta());
    const ev2 = parseEvents(u.push(chunk({ content: 'a' }, 'length')) + u.end());
    assert.equal(ev2.at(-1)!.event, 'response.completed');
  });

  it('a call of a namespaced function is returned with its namespace and bare name, streamed and whole', () => {
    const m = meta({ tools: [{ type: 'namespace', name: 'multi_agent_v1', tools: [{ type: 'function', name: 'spawn_agent' }] }] });
    const call = { index: 0, id: 'call_1', type: 'function', function: { name: 'multi_agent_v1__spawn_agent', arguments: '{"a":1}' } };
    const t = new ResponsesStreamTranslator(m);
    const ev = parseEvents(t.push(chunk({ tool_calls: [call] }, 'tool_calls')) + t.end());
    const done = ev.find((e) => e.event === 'response.output_item.done')!;
    assert.equal(done.data.item.namespace, 'multi_agent_v1');
    assert.equal(done.data.item.name, 'spawn_agent');
    assert.equal(done.data.item.arguments, '{"a":1}');
    assert.equal(ev.at(-1)!.event, 'response.completed');
    const whole = chatToResponse(completion({ content: null, tool_calls: [call] }, 'tool_calls'), m);
    assert.deepEqual(whole.output.find((o) => o.type === 'function_call'), { type: 'function_call', id: whole.output[0].id, call_id: 'call_1', name: 'spawn_agent', namespace: 'multi_agent_v1', arguments: '{"a":1}', status: 'completed' });
  });

  it('error(): response.failed, then an error event in OpenAI error shape; terminal', () => {
    const t = new ResponsesStreamTranslator(meta());
    const out = t.push(chunk({ content: 'a' })) + t.error('engine gone', 'engine_failed');
    const ev = parseEvents(out);
    const [failed, error] = ev.slice(-2);
    assert.equal(failed.event, 'response.failed');
    assert.equal(failed.data.response.status, 'failed');
    assert.deepEqual(failed.data.response.error, { code: 'engine_failed', message: 'engine gone' });
    assert.equal(failed.data.response.output[0].status, 'incomplete');
    assert.equal(error.event, 'error');
    assert.deepEqual(error.data, { type: 'error', sequence_number: ev.length - 1, code: 'engine_failed', message: 'engine gone', param: null, error: { message: 'engine gone', type: 'server_error', code: 'engine_failed' } });
    assert.equal(t.finished, true);
    assert.equal(t.push('[DONE]'), '');
  });

  it('error() before anything else still opens the response first, so the SDK can follow', () => {
    const ev = parseEvents(new ResponsesStreamTranslator(meta()).error('x'));
    assert.deepEqual(
      ev.map((e) => e.event),
      ['response.created', 'response.in_progress', 'response.failed', 'error'],
    );
  });

  it('an error chunk from the engine fails the stream with its message', () => {
    const ev = parseEvents(new ResponsesStreamTranslator(meta()).push({ error: { message: 'context overflow', type: 'invalid_request_error' } }));
    assert.equal(ev.at(-1)!.data.message, 'context overflow');
  });

  it('end() without a finish_reason or [DONE] is a failure', () => {
    const t = new ResponsesStreamTranslator(meta());
    const ev = parseEvents(t.push(chunk({ content: 'a' })) + t.end());
    assert.equal(ev.at(-1)!.event, 'error');
    assert.match(ev.at(-1)!.data.message, /ended before the response was complete/);
  });

  it('pushBytes: events split anywhere (even inside a UTF-8 character) decode whole; a non-JSON event fails the stream', () => {
    const t = new ResponsesStreamTranslator(meta());
    const bytes = Buffer.from(`: keep-alive\n\ndata: ${JSON.stringify(chunk({ content: 'ü🌍' }))}\r\n\r\ndata: ${JSON.stringify(chunk({}, 'stop'))}\n\ndata: [DONE]\n\n`);
    let out = '';
    for (let i = 0; i < bytes.length; i++) out += t.pushBytes(bytes.subarray(i, i + 1));
    out += t.end();
    const ev = parseEvents(out);
    assert.equal(ev.at(-1)!.event, 'response.completed');
    assert.equal(ev.at(-1)!.data.response.output[0].content[0].text, 'ü🌍');

    const bad = new ResponsesStreamTranslator(meta());
    const ev2 = parseEvents(bad.pushBytes('data: {nope\n\n'));
    assert.equal(ev2.at(-1)!.event, 'error');
    assert.match(ev2.at(-1)!.data.message, /not JSON/);
  });

  it('a last event without its blank line still counts at end()', () => {
    const t = new ResponsesStreamTranslator(meta());
    const ev = parseEvents(t.pushBytes(`data: ${JSON.stringify(chunk({ content: 'a' }, 'stop'))}`) + t.end());
    assert.equal(ev.at(-1)!.event, 'response.completed');
  });
});

describe('ChatSseDecoder', () => {
  it('an event longer than the bound is an error, and the decoder stops', () => {
    const d = new ChatSseDecoder(100);
    const r = d.push(`data: ${'x'.repeat(200)}`);
    assert.equal(r.length, 1);
    assert.equal(r[0].kind, 'invalid');
    assert.deepEqual(d.push('\n\ndata: [DONE]\n\n'), []);
    assert.deepEqual(d.end(), []);
  });

  it('multi-line data joins with newlines; event-only and comment blocks are skipped', () => {
    const d = new ChatSseDecoder();
    assert.deepEqual(d.push('event: ping\n\n: c\n\ndata: {"a":\ndata: 1}\n\ndata:[DONE]\n\n'), [{ kind: 'data', value: { a: 1 } }, { kind: 'done' }]);
  });
});
