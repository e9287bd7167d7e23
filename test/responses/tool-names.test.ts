/**
 * Issue 28, item 2: the flat names a Responses request's tools reach the
 * engine by are unique and map back to what the client declared. A
 * collision, a duplicate namespace, a namespace name an engine cannot take,
 * and a tool_choice naming no tool of the request are 400s naming the tool.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { TranslationError } from '../../src/chat/index.ts';
import { responsesToChat } from '../../src/responses/index.ts';

const fn = (name: string) => ({ type: 'function', name, parameters: { type: 'object', properties: {} } });
const ns = (name: unknown, ...tools: object[]) => ({ type: 'namespace', name, description: 'd', tools });

function errorOf(req: Record<string, unknown>): TranslationError {
  const r = responsesToChat({ model: 'm', input: 'hi', ...req });
  assert.ok(!r.ok, `expected a refusal, got ${JSON.stringify(r.ok && r.chat.tools)}`);
  assert.equal(r.error.status, 400);
  return r.error;
}

describe('Responses tools: flat names unique and reversible', () => {
  it('a namespace function whose flat name is a plain function of the request is 400 naming both', () => {
    const e = errorOf({ tools: [ns('a', fn('b')), fn('a__b')] });
    assert.equal(e.param, 'tools[1].name');
    assert.match(e.message, /"a__b"/);
    assert.match(e.message, /tools\[0\]/);
    // The other way round too.
    assert.equal(errorOf({ tools: [fn('a__b'), ns('a', fn('b'))] }).param, 'tools[1].tools[0].name');
  });

  it('two functions of one name, and two namespaces of one name, are 400', () => {
    assert.equal(errorOf({ tools: [fn('x'), fn('x')] }).param, 'tools[1].name');
    const e = errorOf({ tools: [ns('tools_a', fn('p')), ns('tools_a', fn('q'))] });
    assert.equal(e.param, 'tools[1].name');
    assert.match(e.message, /namespace "tools_a"/);
    // Two namespaces whose names differ but flatten to one name: a_ + __ + b and a + __ + _b.
    assert.equal(errorOf({ tools: [ns('a_', fn('b')), ns('a', fn('_b'))] }).param, 'tools[1].tools[0].name');
  });

  it('a namespace name that is empty, over 64 characters, holds characters engines refuse or "__" is 400', () => {
    for (const bad of ['', 'x'.repeat(65), 'x'.repeat(10 * 1024), 'a\u0000b', 'a b', 'a.b', 'a__b', 'ünï']) {
      const e = errorOf({ tools: [ns(bad, fn('f'))] });
      assert.equal(e.param, 'tools[0].name', JSON.stringify(bad.slice(0, 20)));
    }
    assert.equal(errorOf({ tools: [ns(5, fn('f'))] }).param, 'tools[0].name');
    // 64 characters of the allowed kind are fine.
    assert.ok(responsesToChat({ model: 'm', input: 'hi', tools: [ns('n-_'.repeat(21) + 'a', fn('f'))] }).ok);
  });

  it('a tool_choice naming no tool or namespace of the request is 400', () => {
    const tools = [fn('known'), ns('space', fn('inner'))];
    assert.equal(errorOf({ tools, tool_choice: { type: 'function', name: 'unknown' } }).param, 'tool_choice.name');
    assert.equal(errorOf({ tools, tool_choice: { type: 'function', namespace: 'space', name: 'nope' } }).param, 'tool_choice.name');
    assert.equal(errorOf({ tools, tool_choice: { type: 'function', namespace: 'nospace', name: 'inner' } }).param, 'tool_choice.name');
    assert.equal(errorOf({ tools, tool_choice: { type: 'allowed_tools', mode: 'auto', tools: [{ type: 'function', name: 'ghost' }] } }).param, 'tool_choice.tools[0].name');
    assert.equal(errorOf({ tools, tool_choice: { type: 'allowed_tools', mode: 'auto', tools: [{ type: 'namespace', name: 'ghost' }] } }).param, 'tool_choice.tools[0].name');
    // What the request does declare still works, and maps back.
    const ok = responsesToChat({ model: 'm', input: 'hi', tools, tool_choice: { type: 'function', namespace: 'space', name: 'inner' } });
    assert.ok(ok.ok);
    assert.deepEqual(ok.chat.tool_choice, { type: 'function', function: { name: 'space__inner' } });
    assert.deepEqual(ok.meta.namespaced['space__inner'], { namespace: 'space', name: 'inner' });
    const allowed = responsesToChat({ model: 'm', input: 'hi', tools, tool_choice: { type: 'allowed_tools', mode: 'required', tools: [{ type: 'namespace', name: 'space' }] } });
    assert.ok(allowed.ok);
    assert.deepEqual(allowed.chat.tools?.map((t) => t.function.name), ['space__inner']);
  });
});
