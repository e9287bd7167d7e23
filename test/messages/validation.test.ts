/**
 * Issue 28, item 4: what Anthropic's API answers 400 for, a translating node
 * answers 400 for too (invalid_request_error naming the field), rather than
 * sending the engine something else than the client wrote.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { messagesToChat } from '../../src/messages/index.ts';

const base = { model: 'm', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] };
const user = (...content: unknown[]) => ({ ...base, messages: [{ role: 'user', content }] });

function refusedAt(req: Record<string, unknown>): string | null {
  const r = messagesToChat(req);
  assert.ok(!r.ok, `expected a refusal, got ${JSON.stringify(r.ok && r.chat)}`);
  assert.equal(r.error.status, 400);
  assert.ok(r.error.param && r.error.message.includes(r.error.param), `the message names the field: ${r.error.message}`);
  return r.error.param;
}

describe("Messages validation to Anthropic's rules", () => {
  it('an image whose data is not base64, or whose source is incomplete, is 400 naming the field', () => {
    const img = (source: unknown) => ({ type: 'image', source });
    assert.equal(refusedAt(user(img({ type: 'base64', media_type: 'image/png', data: 'not base64!' }))), 'messages[0].content[0].source.data');
    assert.equal(refusedAt(user(img({ type: 'base64', media_type: 'image/png', data: 'AAA' }))), 'messages[0].content[0].source.data');
    assert.equal(refusedAt(user(img({ type: 'base64', media_type: 'image/png', data: null }))), 'messages[0].content[0].source.data');
    assert.equal(refusedAt(user(img({ type: 'base64', media_type: 'text/html', data: 'AAAA' }))), 'messages[0].content[0].source.media_type');
    assert.equal(refusedAt(user(img(undefined))), 'messages[0].content[0].source');
    // Well-formed base64 (with padding, and with line breaks as some encoders write it) passes.
    for (const data of ['AAAA', 'aGk=', 'aA==', 'QUJD\nREVG']) assert.ok(messagesToChat(user(img({ type: 'base64', media_type: 'image/jpeg', data }))).ok, data);
  });

  it('a document whose data is null, missing or not base64 is 400', () => {
    const doc = (source: unknown) => ({ type: 'document', source });
    assert.equal(refusedAt(user(doc({ type: 'base64', media_type: 'application/pdf', data: null }))), 'messages[0].content[0].source.data');
    assert.equal(refusedAt(user(doc({ type: 'base64', media_type: 'application/pdf' }))), 'messages[0].content[0].source.data');
    assert.equal(refusedAt(user(doc({ type: 'base64', media_type: 'application/pdf', data: '%%%' }))), 'messages[0].content[0].source.data');
    assert.equal(refusedAt(user(doc({ type: 'text', media_type: 'text/plain', data: null }))), 'messages[0].content[0].source.data');
    assert.equal(refusedAt(user(doc(null))), 'messages[0].content[0].source');
    assert.equal(refusedAt(user(doc({ type: 'nope' }))), 'messages[0].content[0].source.type');
    assert.ok(messagesToChat(user(doc({ type: 'text', media_type: 'text/plain', data: 'plain words' }))).ok);
    assert.ok(messagesToChat(user(doc({ type: 'base64', media_type: 'application/pdf', data: 'JVBERi0=' }))).ok);
  });

  it('a system block that is not text is 400', () => {
    assert.equal(refusedAt({ ...base, system: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } }] }), 'system[0].type');
    assert.equal(refusedAt({ ...base, system: [{ text: 'no type' }] }), 'system[0].type');
  });

  it('a content block without a type is 400, in user, assistant, system turns and tool results', () => {
    assert.equal(refusedAt(user({ text: 'hi' })), 'messages[0].content[0].type');
    assert.equal(refusedAt({ ...base, messages: [{ role: 'user', content: 'a' }, { role: 'assistant', content: [{ text: 'b' }] }] }), 'messages[1].content[0].type');
    assert.equal(refusedAt({ ...base, messages: [{ role: 'system', content: [{ text: 's' }] }, { role: 'user', content: 'a' }] }), 'messages[0].content[0].type');
    assert.equal(refusedAt(user({ type: 'tool_result', tool_use_id: 't1', content: [{ text: 'r' }] })), 'messages[0].content[0].content[0].type');
    assert.equal(refusedAt(user({ type: 42 })), 'messages[0].content[0].type');
  });

  it('a tool named "" (or not as Anthropic names tools), or two tools of one name, is 400', () => {
    const tool = (name: unknown) => ({ name, input_schema: { type: 'object', properties: {} } });
    assert.equal(refusedAt({ ...base, tools: [tool('')] }), 'tools[0].name');
    assert.equal(refusedAt({ ...base, tools: [tool('a b')] }), 'tools[0].name');
    assert.equal(refusedAt({ ...base, tools: [tool('x'.repeat(129))] }), 'tools[0].name');
    assert.equal(refusedAt({ ...base, tools: [tool('same'), tool('same')] }), 'tools[1].name');
    assert.ok(messagesToChat({ ...base, tools: [tool('mcp__server__tool-1')] }).ok);
  });

  it('max_tokens: null is 400', () => {
    assert.equal(refusedAt({ ...base, max_tokens: null }), 'max_tokens');
  });
});
