/**
 * The pure parts of continuing a cut stream (src/survive/): what the client
 * holds, the request another host gets, and the splice of that host's
 * stream into the client's, with and without the echo of the answer's start
 * that today's llama-server sends.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { continuationBody, cutEnding, EchoFilter, Splice } from '../../src/survive/continuation.ts';
import { Transcript } from '../../src/survive/transcript.ts';
import { ResponsesStreamTranslator } from '../../src/responses/index.ts';
import { MessagesStreamTranslator } from '../../src/messages/index.ts';

const chunk = (delta: Record<string, unknown>, extra: Record<string, unknown> = {}) => `data: ${JSON.stringify({ id: 'c1', created: 1, model: 'm', object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: null }], ...extra })}\n\n`;
const contChunk = (delta: Record<string, unknown>, finish: string | null = null) => `data: ${JSON.stringify({ id: 'c2', created: 2, model: 'm', object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
const dataOf = (out: string) =>
  out
    .split('\n\n')
    .filter((e) => e.startsWith('data: {'))
    .map((e) => JSON.parse(e.slice(6)));

function chatHeld(): Transcript {
  const t = new Transcript('chat');
  t.push(chunk({ role: 'assistant', content: '' }));
  t.push(chunk({ content: 'Hello' }) + chunk({ content: ' wor' }));
  return t;
}

describe('what the client holds of a cut stream', () => {
  it('chat: the text and the events that carried it, continuable while it is all text', () => {
    const t = chatHeld();
    assert.equal(t.text, 'Hello wor');
    assert.equal(t.tokens, 2);
    assert.equal(t.stopped, undefined);
    // A partial event (the cut landed inside it) is not what the client holds.
    t.push('data: {"choices":[{"delta":{"content":"ld"');
    assert.equal(t.text, 'Hello wor');
  });

  it('chat: a tool call, a finish or [DONE] already sent cannot be continued', () => {
    for (const sent of [chunk({ tool_calls: [{ index: 0, function: { name: 'f', arguments: '' } }] }), chunk({ reasoning_content: 'hmm' }), `data: ${JSON.stringify({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })}\n\n`, 'data: [DONE]\n\n', 'event: error\ndata: {"error":{"message":"x"}}\n\n']) {
      const t = chatHeld();
      t.push(sent);
      assert.ok(t.stopped, sent);
      assert.equal(continuationBody(Buffer.from('{"messages":[]}'), t).ok, false);
    }
  });
});

describe('the continuation request', () => {
  it('chat: the answer so far as the last assistant message, the output bound less what was streamed, usage asked for', () => {
    const r = continuationBody(Buffer.from(JSON.stringify({ model: 'm', stream: true, max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] })), chatHeld());
    assert.ok(r.ok);
    const doc = JSON.parse(r.body.toString());
    assert.deepEqual(doc.messages.at(-1), { role: 'assistant', content: 'Hello wor' });
    assert.equal(doc.max_tokens, 8);
    assert.deepEqual(doc.stream_options, { include_usage: true });
  });

  it("a client's own prefill is continued, not repeated", () => {
    const r = continuationBody(Buffer.from(JSON.stringify({ messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'Sure: ' }] })), chatHeld());
    assert.ok(r.ok);
    const doc = JSON.parse(r.body.toString());
    assert.equal(doc.messages.length, 2);
    assert.equal(doc.messages[1].content, 'Sure: Hello wor');
  });

  it('Responses: a string input becomes a user message followed by the answer so far; Messages: max_tokens lowered', () => {
    const t = new Transcript('responses');
    t.text = 'abc';
    t.tokens = 3;
    const r = continuationBody(Buffer.from(JSON.stringify({ input: 'q', max_output_tokens: 5 })), t);
    assert.ok(r.ok);
    assert.deepEqual(JSON.parse(r.body.toString()), { input: [{ role: 'user', content: 'q' }, { type: 'message', role: 'assistant', content: 'abc' }], max_output_tokens: 2, stream: true });
    const m = new Transcript('messages');
    m.text = 'x';
    m.tokens = 1;
    const mr = continuationBody(Buffer.from(JSON.stringify({ max_tokens: 100, messages: [{ role: 'user', content: 'q' }] })), m);
    assert.ok(mr.ok);
    assert.deepEqual(JSON.parse(mr.body.toString()).messages.at(-1), { role: 'assistant', content: 'x' });
    assert.equal(JSON.parse(mr.body.toString()).max_tokens, 99);
  });
});

describe('the echo of the answer so far', () => {
  const cases: [string, string[], string, boolean][] = [
    ['no echo (an OpenAI-compatible server)', ['ld', '!'], 'ld!', false],
    ["today's llama-server: the whole prefill in the first delta", ['Hello world', '!'], 'ld!', true],
    ['an echo split over deltas', ['Hel', 'lo w', 'orld'], 'ld', true],
    ['a start that only looks like the echo for a while', ['Hel', 'p'], 'Help', false],
  ];
  for (const [name, deltas, want, echoed] of cases) {
    it(name, () => {
      const f = new EchoFilter('Hello wor');
      assert.equal(deltas.map((d) => f.take(d)).join(''), want);
      assert.equal(f.echoed, echoed);
    });
  }
});

describe('the splice of the continuation into the client stream', () => {
  it('chat, from a server that echoes: one id, the role once, the echo dropped, usage moved to output', () => {
    const s = new Splice(chatHeld(), true);
    const out =
      s.push(contChunk({ role: 'assistant', content: null })) +
      s.push(contChunk({ content: 'Hello world' }) + contChunk({ content: '!' }, 'stop')) +
      s.push(`data: ${JSON.stringify({ id: 'c2', choices: [], usage: { prompt_tokens: 12, completion_tokens: 2, total_tokens: 14 } })}\n\n`) +
      s.push('data: [DONE]\n\n');
    const chunks = dataOf(out);
    assert.ok(chunks.every((c) => c.id === 'c1' && c.created === 1), 'the client’s id and creation time');
    assert.ok(chunks.every((c) => c.choices?.[0]?.delta?.role === undefined));
    assert.equal(chunks.map((c) => c.choices?.[0]?.delta?.content ?? '').join(''), 'ld!');
    assert.deepEqual(chunks.at(-1).usage, { prompt_tokens: 10, completion_tokens: 4, total_tokens: 14 });
    assert.ok(out.endsWith('data: [DONE]\n\n'));
    assert.equal(s.completed, true);
  });

  it('chat: the usage the client did not ask for is not sent', () => {
    const s = new Splice(chatHeld(), false);
    const out = s.push(contChunk({ content: 'ld' }, 'stop') + `data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 1, completion_tokens: 1 } })}\n\n` + 'data: [DONE]\n\n');
    assert.ok(!out.includes('usage'));
  });

  it('chat: a continuation that ends without [DONE] or with an error ends the client stream with one error event', () => {
    const s = new Splice(chatHeld(), false);
    s.push(contChunk({ content: 'ld' }));
    const end = s.end();
    assert.match(end, /^event: error\n/);
    assert.equal(s.completed, false);
    assert.equal(s.end(), '');
  });

  it('Messages: the open text block goes on (its index, no second message_start), usage moved to output', () => {
    const t = new Transcript('messages');
    const before = new MessagesStreamTranslator({ id: 'msg_1', model: 'm' } as never);
    t.push(before.push({ choices: [{ index: 0, delta: { content: 'Hello wor' } }] }));
    assert.equal(t.openText, 0);
    const cont = new MessagesStreamTranslator({ id: 'msg_2', model: 'm' } as never);
    const s = new Splice(t, false);
    const out = s.push(cont.push({ choices: [{ index: 0, delta: { content: 'Hello world' } }] })) + s.push(cont.push({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }], usage: { prompt_tokens: 9, completion_tokens: 1 } })) + s.push(cont.end());
    assert.ok(!out.includes('message_start'));
    assert.ok(!out.includes('content_block_start'));
    const deltas = [...out.matchAll(/"text_delta","text":"([^"]*)"/g)].map((m) => m[1]);
    assert.deepEqual(deltas, ['ld']);
    assert.match(out, /"usage":\{"input_tokens":8,"output_tokens":2/);
    assert.ok(out.endsWith('event: message_stop\ndata: {"type":"message_stop"}\n\n'));
  });

  it('Messages: a continuation that starts with a tool call closes the client’s text block first', () => {
    const t = new Transcript('messages');
    t.push(new MessagesStreamTranslator({ id: 'msg_1', model: 'm' } as never).push({ choices: [{ index: 0, delta: { content: 'Let me check' } }] }));
    const cont = new MessagesStreamTranslator({ id: 'msg_2', model: 'm' } as never);
    const s = new Splice(t, false);
    const out = s.push(cont.push({ choices: [{ index: 0, delta: { tool_calls: [{ index: 0, id: 'call_1', function: { name: 'f', arguments: '{}' } }] } }] }));
    const events = [...out.matchAll(/event: (\w+)\ndata: (.*)\n/g)].filter((m) => m[1] !== 'ping').map((m) => [m[1], JSON.parse(m[2]).index]);
    assert.deepEqual(events.slice(0, 2), [
      ['content_block_stop', 0],
      ['content_block_start', 1],
    ]);
  });

  it('Responses: sequence numbers go on, the item is the client’s, its texts whole (with and without the echo)', () => {
    for (const echo of [true, false]) {
      const t = new Transcript('responses');
      const before = new ResponsesStreamTranslator({ id: 'resp_a', model: 'm', createdAt: 1 } as never);
      t.push(before.push({ choices: [{ index: 0, delta: { content: 'Hello wor' } }] }));
      const cont = new ResponsesStreamTranslator({ id: 'resp_b', model: 'm', createdAt: 2 } as never);
      const s = new Splice(t, false);
      const out =
        s.push(cont.push({ choices: [{ index: 0, delta: { content: echo ? 'Hello world' : 'ld' } }] })) +
        s.push(cont.push({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }], usage: { prompt_tokens: 9, completion_tokens: 1 } })) +
        s.push(cont.end());
      const all = [...out.matchAll(/event: ([\w.]+)\ndata: (.*)\n/g)].map((m) => ({ type: m[1], ...JSON.parse(m[2]) }));
      assert.ok(all.every((e, i) => e.sequence_number === t.seq - all.length + 1 + i), 'unbroken sequence numbers');
      assert.ok(!all.some((e) => e.type === 'response.created' || e.type === 'response.output_item.added'));
      const itemId = t.item!.id;
      assert.equal(all.find((e) => e.type === 'response.output_text.delta').delta, 'ld');
      assert.equal(all.find((e) => e.type === 'response.output_text.done').text, 'Hello world');
      const done = all.find((e) => e.type === 'response.completed').response;
      assert.equal(done.id, 'resp_a');
      assert.equal(done.output[0].id, itemId);
      assert.equal(done.output[0].content[0].text, 'Hello world');
      assert.equal(done.usage.output_tokens, 2);
      assert.equal(done.usage.input_tokens, 8);
    }
  });

  it('cut before the client had an event: the continuation goes to it as it is, its opening included', () => {
    const t = new Transcript('messages');
    const cont = new MessagesStreamTranslator({ id: 'msg_2', model: 'm' } as never);
    const s = new Splice(t, false);
    const out = s.push(cont.push({ choices: [{ index: 0, delta: { content: 'hi' } }] })) + s.push(cont.push({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })) + s.push(cont.end());
    assert.deepEqual(
      [...out.matchAll(/event: (\w+)/g)].map((m) => m[1]).filter((x) => x !== 'ping'),
      ['message_start', 'content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop'],
    );
    assert.equal(s.completed, true);
  });

  it('a stream that is not continued ends with its API’s error, after the events the client holds', () => {
    const t = new Transcript('responses');
    t.push(new ResponsesStreamTranslator({ id: 'resp_a', model: 'm', createdAt: 1 } as never).push({ choices: [{ index: 0, delta: { content: 'x' } }] }));
    const seq = t.seq;
    const out = cutEnding(t, 'gone');
    const events = [...out.matchAll(/event: ([\w.]+)\ndata: (.*)\n/g)].map((m) => ({ type: m[1], ...JSON.parse(m[2]) }));
    assert.deepEqual(
      events.map((e) => [e.type, e.sequence_number]),
      [
        ['response.failed', seq + 1],
        ['error', seq + 2],
      ],
    );
    assert.match(cutEnding(new Transcript('messages'), 'gone'), /^event: error\ndata: \{"type":"error","error":\{"type":"api_error","message":"gone"\}\}/);
  });
});
