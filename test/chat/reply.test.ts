/**
 * Issue 25, item 6: the assistant's reply as the executor reads it, from a
 * stream (content strings decoded alone, tool calls and reasoning parsed
 * whole) and from a whole answer, the same either way.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ReplyCollector, replyOfCompletion } from '../../src/chat/index.ts';
import { SseScanner } from '../../src/http/sse.ts';

const ev = (delta: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
  `data: ${JSON.stringify({ id: 'x', object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: null }], ...extra })}\n\n`;

/** Feed a stream through the scanner in awkward pieces, as the relay does. */
function scan(events: string[], pieces = 7): SseScanner {
  const s = new SseScanner(false, () => 1, true);
  const all = Buffer.from(events.join('') + 'data: [DONE]\n\n');
  for (let i = 0; i < all.length; i += pieces) s.push(all.subarray(i, i + pieces));
  s.flush();
  return s;
}

describe('the reply of a stream and of a whole answer (issue 25, item 6)', () => {
  it('content strings, escapes and all, join into the text; role-only and finishing events add nothing', () => {
    const parts = ['Hello', ', "world"', ' \\ back\\slash', '\n', ' ünïcødé 🚀', '\u0000end'];
    const s = scan([ev({ role: 'assistant', content: '' }), ...parts.map((p) => ev({ content: p })), ev({}, { choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })]);
    assert.deepEqual(s.reply?.reply, { text: parts.join(''), calls: [] });
  });

  it('tool calls split across events are joined by index; content null is no text', () => {
    const s = scan([
      ev({ role: 'assistant', content: 'Reading.' }),
      ev({ content: null, tool_calls: [{ index: 0, id: 'c0', type: 'function', function: { name: 'read', arguments: '' } }] }),
      ev({ tool_calls: [{ index: 0, function: { arguments: '{"path":' } }] }),
      ev({ tool_calls: [{ index: 0, function: { arguments: '"a.ts"}' } }] }),
      ev({ tool_calls: [{ index: 1, id: 'c1', function: { name: 'write', arguments: '{}' } }] }),
      ev({ content: null }),
    ]);
    assert.deepEqual(s.reply?.reply, { text: 'Reading.', calls: [{ name: 'read', args: '{"path":"a.ts"}' }, { name: 'write', args: '{}' }] });
  });

  it('a reply with reasoning is not known (the client does not echo it, so the cache parts at the reply)', () => {
    const s = scan([ev({ role: 'assistant', content: 'a' }), ev({ reasoning_content: 'hmm' }), ev({ content: 'b' })]);
    assert.equal(s.reply?.reply, undefined);
  });

  it('an event with two content keys (logprobs) is parsed whole, and only the delta counts', () => {
    const s = scan([ev({ content: 'a' }), ev({ content: 'b' }, { logprobs: { content: 'zzz' } }), ev({ content: 'c' })]);
    assert.equal(s.reply?.reply?.text, 'abc');
  });

  it('the usage chunk is read as before, and the reply alongside', () => {
    const s = scan([ev({ content: 'ok' }), `data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 10, completion_tokens: 2, prompt_tokens_details: { cached_tokens: 4 } } })}\n\n`]);
    assert.equal(s.seen.cachedTokens, 4);
    assert.equal(s.reply?.reply?.text, 'ok');
  });

  it('a whole answer gives the same reply; reasoning makes it unknown', () => {
    const message = { role: 'assistant', content: 'Reading.', tool_calls: [{ id: 'c0', type: 'function', function: { name: 'read', arguments: '{"path":"a.ts"}' } }] };
    assert.deepEqual(replyOfCompletion({ choices: [{ index: 0, message, finish_reason: 'tool_calls' }] }), { text: 'Reading.', calls: [{ name: 'read', args: '{"path":"a.ts"}' }] });
    assert.equal(replyOfCompletion({ choices: [{ index: 0, message: { ...message, reasoning_content: 'hmm' } }] }), undefined);
    assert.equal(replyOfCompletion({ error: { message: 'no' } }), undefined);
  });

  it('a scanner not asked for the reply gathers none; an event that does not parse loses it', () => {
    const plain = new SseScanner(false);
    plain.push(Buffer.from(ev({ content: 'a' })));
    assert.equal(plain.reply, undefined);
    const c = new ReplyCollector();
    c.event(Buffer.from('data: {"choices":[{"delta":{"tool_calls":[oops\n\n'));
    assert.equal(c.reply, undefined);
  });
});
