/**
 * Issue 17: the prefix chain (SPEC section 9, step 6). Formatting never
 * changes it, a new turn extends it, a different system prompt changes every
 * link, the walk is bounded on a 30 MiB body, completions get a link per
 * KiB, a Responses request and its chat translation share one chain, and
 * the sim engine's cache counts the same tokens the chain does.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { renderPrompt, commonPrefixTokens } from '../../src/engines/prompt-cache.ts';
import { scanJsonObject, type ScannedObject } from '../../src/http/json-scan.ts';
import { responsesToChat } from '../../src/responses/index.ts';
import { endpointFor, promptDialectOf } from '../../src/workloads/workloads.ts';
import { CHAIN_LINKS_MAX, CHAIN_WALK_MAX, prefixChain, walkPrompt } from '../../src/prompt/chain.ts';
import { GENERATION_PROMPT } from '../../src/prompt/canonical.ts';
import type { PrefixChain } from '../../src/prompt/held.ts';

const dialectOf = (path: string) => promptDialectOf(endpointFor(path) ?? { workload: 'chat', dialect: 'plain', action: 'infer' });

function walkText(text: string, path = '/v1/chat/completions', hygiene = false) {
  return timedWalk(text, path, hygiene).walk;
}
/** The walk (speed is measured in benchmarks, not asserted here: the bound shows in what is and is not linked). */
function timedWalk(text: string, path = '/v1/chat/completions', hygiene = false) {
  const body = Buffer.from(text);
  const s = scanJsonObject(body);
  assert.ok(s.ok, 'the test body is JSON');
  return { walk: walkPrompt(body, s.object, dialectOf(path), { hygiene }) };
}
const chain = (doc: unknown, path = '/v1/chat/completions', hygiene = false): PrefixChain => walkText(JSON.stringify(doc), path, hygiene).chain;

const sys = (t: string) => ({ role: 'system', content: t });
const user = (t: string) => ({ role: 'user', content: t });
const asst = (t: string) => ({ role: 'assistant', content: t });
const tool = (name: string) => ({ type: 'function', function: { name, description: `the ${name} tool`, parameters: { type: 'object', properties: { a: { type: 'string' } } } } });

const turn1 = { model: 'm', messages: [sys('You are terse.'), user('What is 2+2?')] };
const turn2 = { model: 'm', messages: [...turn1.messages, asst('4'), user('And 3+3?')] };

describe('the prefix chain', () => {
  it('does not change with whitespace, key order, escapes or where the members lie in the body', () => {
    const base = chain({ ...turn2, tools: [tool('grep')] });
    assert.equal(base.length, 5, 'one link per tool and per message');
    const pretty = JSON.stringify({ tools: [tool('grep')], ...turn2 }, null, 2);
    assert.deepEqual(walkText(pretty).chain, base);
    const reordered = {
      stream: true,
      messages: turn2.messages.map((m) => ({ content: m.content, role: m.role })),
      tools: [{ function: { parameters: { properties: { a: { type: 'string' } }, type: 'object' }, description: 'the grep tool', name: 'grep' }, type: 'function' }],
      model: 'm',
    };
    assert.deepEqual(chain(reordered), base);
    const escaped = JSON.stringify({ ...turn2, tools: [tool('grep')] }).replace('terse', '\\u0074erse');
    assert.deepEqual(walkText(escaped).chain, base);
    for (const l of base) assert.match(l.hash, /^[0-9a-f]{16}$/);
  });

  it('is extended by a new turn: the earlier links stay equal, tokens grow', () => {
    const a = chain(turn1);
    const b = chain(turn2);
    assert.deepEqual(b.slice(0, a.length), a);
    assert.equal(b.length, a.length + 2);
    for (let i = 1; i < b.length; i++) assert.ok(b[i].tokens > b[i - 1].tokens);
  });

  it('changes every link with a different system prompt', () => {
    const a = chain(turn2);
    const b = chain({ ...turn2, messages: [sys('You are verbose.'), ...turn2.messages.slice(1)] });
    assert.equal(a.length, b.length);
    for (let i = 0; i < a.length; i++) assert.notEqual(a[i].hash, b[i].hash, `link ${i}`);
  });

  it('puts the tools after the system message, one link each: a tool appended at the end keeps the links before it; the head is system and tools', () => {
    const one = walkText(JSON.stringify({ ...turn1, tools: [tool('grep')] }));
    const two = walkText(JSON.stringify({ ...turn1, tools: [tool('grep'), tool('sed')] }));
    assert.equal(two.chain[0].hash, one.chain[0].hash, 'the system message');
    assert.equal(two.chain[1].hash, one.chain[1].hash, 'the first tool');
    assert.notEqual(two.chain[2].hash, one.chain[2].hash);
    assert.equal(one.head, 1, 'the system message, then the tool');
    assert.equal(two.head, 2);
    // A different system prompt changes the tools' links too (they follow it).
    const other = walkText(JSON.stringify({ ...turn1, messages: [sys('You are verbose.'), turn1.messages[1]], tools: [tool('grep')] }));
    assert.notEqual(other.chain[1].hash, one.chain[1].hash);
    // Without tools or system the head is the first message.
    assert.equal(walkText(JSON.stringify({ model: 'm', messages: [user('hi'), asst('yo')] })).head, 0);
    assert.equal(walkText(JSON.stringify({ model: 'm', messages: [] })).head, -1);
    assert.equal(walkText(JSON.stringify({ model: 'm', input: 'x' }), '/v1/embeddings').head, -1);
  });

  it('gives two conversations with one system prompt the same head', () => {
    const a = walkText(JSON.stringify(turn2));
    const b = walkText(JSON.stringify({ model: 'm', messages: [sys('You are terse.'), user('Name a colour.')] }));
    assert.equal(a.chain[a.head].hash, b.chain[b.head].hash);
    assert.notEqual(a.chain[1].hash, b.chain[1].hash);
  });

  it('walks at most 1 MiB of a 30 MiB body: what lies past the bound is not read', () => {
    const huge = 'x'.repeat(30 * 1024 * 1024);
    const doc = { model: 'm', messages: [sys('You are terse.'), user('short'), user(huge), user('after')] };
    const { walk: w } = timedWalk(JSON.stringify(doc));
    assert.equal(w.chain.length, 2, 'the links before the huge message, none after');
    assert.equal(w.complete, false);
    // Many small messages: the chain stops at its bound on links, cheaply.
    const many = Array.from({ length: 1_000_000 }, () => ({ role: 'user', content: 'x' }));
    const { walk: m } = timedWalk(JSON.stringify({ model: 'm', messages: many }));
    assert.equal(m.chain.length, CHAIN_LINKS_MAX);
    assert.equal(m.complete, false);
    // Messages of about 1 KB: the 1 MiB bound on bytes comes first.
    const kb = Array.from({ length: 30_000 }, (_, i) => user(`message number ${i} ${'y'.repeat(1000)}`));
    const h = walkText(JSON.stringify({ model: 'm', messages: kb }));
    assert.ok(h.chain.length <= CHAIN_WALK_MAX / 1000 && h.chain.length > CHAIN_WALK_MAX / 1100, `${h.chain.length} links`);
    // A huge system prompt: a completion prompt cut at the bound still gives its whole KiB links.
    const c = walkText(JSON.stringify({ model: 'm', prompt: huge }), '/v1/completions');
    assert.equal(c.chain.length, CHAIN_WALK_MAX / 1024 - 1, 'the last KiB (cut at the closing quote) is not linked');
  });

  it('links a completion prompt at every 1 KiB and at its end', () => {
    const p = 'a'.repeat(2048) + 'b'.repeat(952);
    const c = chain({ model: 'm', prompt: p }, '/v1/completions');
    assert.deepEqual(
      c.map((l) => l.tokens),
      [256, 512, 750],
    );
    const d = chain({ model: 'm', prompt: 'a'.repeat(2048) + 'c'.repeat(952) }, '/v1/completions');
    assert.deepEqual(d.slice(0, 2), c.slice(0, 2));
    assert.notEqual(d[2].hash, c[2].hash);
    assert.equal(walkText(JSON.stringify({ model: 'm', prompt: p })).chain.length, 0, 'a chat path reads messages, not prompt');
  });

  it('is pure: the same body gives the same chain every time (on every node)', () => {
    const text = JSON.stringify({ ...turn2, tools: [tool('grep')] });
    assert.deepEqual(walkText(text), walkText(text));
    assert.deepEqual(prefixChain(Buffer.from(text), (scanJsonObject(Buffer.from(text)) as { object: ScannedObject }).object, 'chat'), walkText(text).chain);
  });

  it('gives a Responses request and its chat translation one chain', () => {
    const resp = {
      model: 'm',
      instructions: 'You are terse.',
      tools: [{ type: 'function', name: 'grep', description: 'the grep tool', parameters: { type: 'object', properties: { a: { type: 'string' } } } }],
      input: [
        { role: 'developer', content: 'Use tools.' },
        { role: 'user', content: [{ type: 'input_text', text: 'find a' }, { type: 'input_text', text: 'in b' }] },
        { type: 'reasoning', summary: [] },
        { role: 'assistant', content: [{ type: 'output_text', text: 'Looking.' }] },
        { type: 'function_call', call_id: 'c1', name: 'grep', arguments: '{"a":"x"}' },
        { type: 'function_call', call_id: 'c2', name: 'grep', arguments: '{"a":"y"}' },
        { type: 'function_call_output', call_id: 'c1', output: 'found' },
        { role: 'user', content: 'thanks' },
      ],
    };
    const t = responsesToChat(resp);
    assert.ok(t.ok);
    const r = chain(resp, '/v1/responses');
    assert.equal(r.length, 7);
    assert.deepEqual(r, chain(t.chat, '/v1/chat/completions'));
    assert.deepEqual(chain({ model: 'm', input: 'hello' }, '/v1/responses'), chain({ model: 'm', messages: [user('hello')] }));
  });

  it('reads Messages requests: system blocks, tool_use and tool_result; hygiene leaves the billing header out', () => {
    const doc = (billing: string) => ({
      model: 'm',
      system: [
        { type: 'text', text: `x-anthropic-billing-header: ${billing}` },
        { type: 'text', text: 'You are Claude Code.' },
      ],
      tools: [{ name: 'Bash', description: 'run', input_schema: { type: 'object' } }],
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'list files' }] },
        { role: 'assistant', content: [{ type: 'text', text: 'ok' }, { type: 'tool_use', id: 't1', name: 'Bash', input: { command: 'ls' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: 'a b' }, { type: 'text', text: 'now?' }] },
      ],
    });
    const a = chain(doc('cc=1'), '/v1/messages', true);
    const b = chain(doc('cc=2'), '/v1/messages', true);
    assert.equal(a.length, 6, 'system, tool, user, assistant, tool result, user');
    assert.deepEqual(a, b, 'with hygiene the billing header is not part of the prompt');
    const c = chain(doc('cc=1'), '/v1/messages', false);
    const d = chain(doc('cc=2'), '/v1/messages', false);
    for (let i = 0; i < c.length; i++) assert.notEqual(c[i].hash, d[i].hash, `without hygiene the header opens the system prompt: link ${i} differs`);
    assert.deepEqual(chain({ model: 'm', system: 'S', messages: [user('q')] }, '/v1/messages'), chain({ model: 'm', messages: [sys('S'), user('q')] }));
  });

  it('counts the tokens the sim engine renders and reuses', () => {
    const doc = { ...turn2, tools: [tool('grep')] };
    const c = chain(doc);
    const text = renderPrompt(true, doc)!;
    assert.ok(text.startsWith('<|system|>\nYou are terse.\n<|tools|>\ngrep\n'), 'the tools right after the system message');
    assert.equal(c[c.length - 1].tokens, Math.floor((text.length - GENERATION_PROMPT.length) / 4));
    // A slot that served turn 1 (and answered "4") holds at least what the chain says turn 2 shares with it.
    const held = renderPrompt(true, { ...turn1, tools: [tool('grep')] })! + '4';
    assert.ok(commonPrefixTokens(held, text) >= c[2].tokens);
    assert.equal(renderPrompt(false, { prompt: 'P' }), 'P');
    assert.equal(renderPrompt(true, {}), undefined);
  });
});
