/**
 * Issue 25, item 6: the link an assistant's reply adds to a prompt's chain
 * is the very link the next turn's chain has there, when the client echoes
 * the reply in its dialect (chat, Responses, Messages; tool calls too).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ChatReply } from '../../src/chat/index.ts';
import { scanJsonObject } from '../../src/http/json-scan.ts';
import { walkPrompt } from '../../src/prompt/chain.ts';
import type { PrefixChain } from '../../src/prompt/held.ts';
import { replyLink } from '../../src/prompt/reply.ts';
import type { PromptDialect } from '../../src/workloads/workloads.ts';

function chainOf(doc: unknown, dialect: PromptDialect): PrefixChain {
  const body = Buffer.from(JSON.stringify(doc));
  const s = scanJsonObject(body);
  assert.ok(s.ok);
  return walkPrompt(body, s.object, dialect).chain;
}

const tools = [{ type: 'function', function: { name: 'read', description: 'read a file', parameters: { type: 'object', properties: { path: { type: 'string' } } } } }];
const text: ChatReply = { text: 'Here is the plan: first "read", then\nwrite.', calls: [] };
const called: ChatReply = { text: 'Reading it.', calls: [{ name: 'read', args: '{"path": "a.ts"}' }] };
const callOnly: ChatReply = { text: '', calls: [{ name: 'read', args: '{"path":"b.ts"}' }, { name: 'read', args: '{"path":"c.ts"}' }] };

/** Each dialect's first turn, and its next turn with the reply echoed as that dialect's clients do. */
const dialects: { dialect: PromptDialect; first: unknown; next: (r: ChatReply) => unknown }[] = [
  {
    dialect: 'chat',
    first: { model: 'm', tools, messages: [{ role: 'system', content: 'be brief' }, { role: 'user', content: 'plan it' }] },
    next: (r) => ({
      model: 'm',
      tools,
      messages: [
        { role: 'system', content: 'be brief' },
        { role: 'user', content: 'plan it' },
        r.calls.length
          ? { role: 'assistant', content: r.text || null, tool_calls: r.calls.map((c, i) => ({ id: `c${i}`, type: 'function', function: { name: c.name, arguments: c.args } })) }
          : { role: 'assistant', content: r.text },
        ...r.calls.map((_, i) => ({ role: 'tool', tool_call_id: `c${i}`, content: 'file text' })),
        { role: 'user', content: 'go on' },
      ],
    }),
  },
  {
    dialect: 'responses',
    first: { model: 'm', instructions: 'be brief', tools: [{ type: 'function', name: 'read', parameters: {} }], input: [{ role: 'user', content: 'plan it' }] },
    next: (r) => ({
      model: 'm',
      instructions: 'be brief',
      tools: [{ type: 'function', name: 'read', parameters: {} }],
      input: [
        { role: 'user', content: 'plan it' },
        ...(r.text !== '' || r.calls.length === 0 ? [{ type: 'message', role: 'assistant', content: [{ type: 'output_text', text: r.text }] }] : []),
        ...r.calls.map((c, i) => ({ type: 'function_call', call_id: `c${i}`, name: c.name, arguments: c.args })),
        ...r.calls.map((_, i) => ({ type: 'function_call_output', call_id: `c${i}`, output: 'file text' })),
        { role: 'user', content: 'go on' },
      ],
    }),
  },
  {
    dialect: 'messages',
    first: { model: 'm', system: 'be brief', messages: [{ role: 'user', content: 'plan it' }] },
    next: (r) => ({
      model: 'm',
      system: 'be brief',
      messages: [
        { role: 'user', content: 'plan it' },
        {
          role: 'assistant',
          content: [
            ...(r.text !== '' || r.calls.length === 0 ? [{ type: 'text', text: r.text }] : []),
            ...r.calls.map((c, i) => ({ type: 'tool_use', id: `t${i}`, name: c.name, input: JSON.parse(c.args) })),
          ],
        },
        { role: 'user', content: [...r.calls.map((_, i) => ({ type: 'tool_result', tool_use_id: `t${i}`, content: 'file text' })), { type: 'text', text: 'go on' }] },
      ],
    }),
  },
];

describe('the reply link (issue 25, item 6)', () => {
  for (const d of dialects) {
    for (const [name, reply] of [['text', text], ['text and a tool call', called], ['tool calls only', callOnly]] as const) {
      it(`${d.dialect}, ${name}: the next turn's chain has the reply's link right after the prompt's last`, () => {
        const first = chainOf(d.first, d.dialect);
        const next = chainOf(d.next(reply), d.dialect);
        const link = replyLink(first, reply, d.dialect);
        assert.ok(link);
        assert.deepEqual(next.slice(0, first.length), first, 'the next turn starts with the whole prompt');
        assert.equal(next[first.length].hash, link.hash);
        assert.ok(Math.abs(next[first.length].tokens - link.tokens) <= 1, `tokens ${link.tokens} vs ${next[first.length].tokens}`);
      });
    }
  }

  it('a reply the client changed makes a link the next turn does not have', () => {
    const d = dialects[0];
    const first = chainOf(d.first, 'chat');
    const next = chainOf(d.next({ text: 'something else', calls: [] }), 'chat');
    assert.ok(!next.some((l) => l.hash === replyLink(first, text, 'chat')!.hash));
  });

  it('completions and empty chains add nothing', () => {
    assert.equal(replyLink([{ hash: '0123456789abcdef', tokens: 10 }], text, 'completions'), undefined);
    assert.equal(replyLink([], text, 'chat'), undefined);
  });
});
