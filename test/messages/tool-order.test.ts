/**
 * Prompt-cache hygiene, tool order (SPEC section 4): within one session the
 * engine sees the tools in a stable order (those already sent first, new
 * ones after), so a tool an agent loads mid-session, inserted into the
 * middle of its list, does not throw the cached prompt away. The pure order
 * and its bounded memory by table; then measured on the sim engine's cache
 * through a node, with api.agent_hygiene on and off.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { stableOrder, ToolOrderMemory } from '../../src/dispatch/execute/tool-order.ts';
import { renderPrompt, reusableTokens } from '../../src/engines/prompt-cache.ts';
import { messagesToChat } from '../../src/messages/index.ts';
import { startNode, type TestNode } from '../helpers/node.ts';

const id = (s: string) => s;

describe('stableOrder', () => {
  const cases: { name: string; known: string[] | undefined; sent: string[]; ordered: string[]; remembered: string[] }[] = [
    { name: 'a first request is sent as it is', known: undefined, sent: ['a', 'b', 'c'], ordered: ['a', 'b', 'c'], remembered: ['a', 'b', 'c'] },
    { name: 'a tool inserted in the middle goes last', known: ['a', 'b', 'c'], sent: ['a', 'x', 'b', 'c'], ordered: ['a', 'b', 'c', 'x'], remembered: ['a', 'b', 'c', 'x'] },
    { name: 'a reordered list keeps the first order', known: ['a', 'b', 'c'], sent: ['c', 'a', 'b'], ordered: ['a', 'b', 'c'], remembered: ['a', 'b', 'c'] },
    { name: 'a dropped tool is skipped but remembered', known: ['a', 'b', 'c'], sent: ['a', 'c'], ordered: ['a', 'c'], remembered: ['a', 'b', 'c'] },
    { name: 'a dropped tool offered again returns to its place', known: ['a', 'b', 'c'], sent: ['c', 'b', 'a'], ordered: ['a', 'b', 'c'], remembered: ['a', 'b', 'c'] },
    { name: 'two new tools keep the client order among themselves', known: ['a'], sent: ['y', 'a', 'x'], ordered: ['a', 'y', 'x'], remembered: ['a', 'y', 'x'] },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const r = stableOrder(c.known, c.sent, id);
      assert.deepEqual(r.ordered, c.ordered);
      assert.deepEqual(r.known, c.remembered);
    });
  }
});

describe('ToolOrderMemory: bounded in sessions and time', () => {
  it('remembers per session, forgets after its TTL, and drops the least recently used past its size', () => {
    let now = 0;
    const m = new ToolOrderMemory(() => now, 2, 1000);
    assert.deepEqual(m.order('s1', ['a', 'b'], id), ['a', 'b']);
    assert.deepEqual(m.order('s1', ['b', 'x', 'a'], id), ['a', 'b', 'x']);
    assert.deepEqual(m.order('s2', ['b', 'a'], id), ['b', 'a'], 'another session has its own order');
    now = 500;
    m.order('s3', ['q'], id);
    assert.equal(m.size, 2);
    assert.deepEqual(m.order('s1', ['b', 'a'], id), ['b', 'a'], 's1 was the least recently used: dropped');
    now = 2000;
    assert.deepEqual(m.order('s3', ['r', 'q'], id), ['r', 'q'], 'past the TTL a session starts afresh');
  });
});

/** A tool whose description is long enough that the tools dominate the prompt, as an agent's do. */
const tool = (name: string) => ({ name, description: `${name}: ${'does a careful thing. '.repeat(60)}`, input_schema: { type: 'object', properties: { arg: { type: 'string' } } } });
const SYSTEM = 'You are a coding agent. '.repeat(40);

describe('a tool loaded mid-session keeps the cache (sim engine, through a node)', () => {
  let on: TestNode, off: TestNode;
  const sim = { ttft_ms: 2, prefill_ms_per_1k: 1, tokens_per_s: 5000, output_tokens: 6 };
  before(async () => {
    on = await startNode({ node: { name: 'tools-on' }, models: [{ name: 'm', engine: 'sim', parallel: 1, sim }] });
    off = await startNode({ node: { name: 'tools-off' }, api: { agent_hygiene: false }, models: [{ name: 'm', engine: 'sim', parallel: 1, sim }] });
  });
  after(async () => {
    await on?.stop();
    await off?.stop();
  });

  async function turn(url: string, session: string, tools: unknown[], messages: unknown[]): Promise<{ text: string; cached: number }> {
    const r = await request(`${url}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-claude-code-session-id': session },
      body: JSON.stringify({ model: 'm', max_tokens: 50, system: SYSTEM, tools, messages }),
    });
    const doc = (await r.body.json()) as { content: { text: string }[]; usage: { cache_read_input_tokens: number } };
    assert.equal(r.statusCode, 200, JSON.stringify(doc));
    return { text: doc.content[0].text, cached: doc.usage.cache_read_input_tokens };
  }

  /** The prompt the sim renders for a Messages request whose tools reach the engine in `order`. */
  const rendered = (body: Record<string, unknown>, order: string[]) => {
    const t = messagesToChat({ model: 'm', max_tokens: 50, ...body });
    assert.ok(t.ok);
    const tools = order.map((n) => t.chat.tools!.find((x) => x.function.name === n)!);
    return renderPrompt(true, { messages: t.chat.messages, tools })!;
  };

  const results: Record<string, number> = {};
  for (const hygiene of [true, false]) {
    it(`api.agent_hygiene ${hygiene ? 'on: the engine sees the new tool last, and the cache keeps everything before it' : 'off: the engine sees the tool where the client put it, and the cache ends there'}`, async () => {
      const url = hygiene ? on.url : off.url;
      const session = `tools-${hygiene}`;
      const q1 = { role: 'user', content: 'first question' };
      const first = { system: SYSTEM, tools: [tool('Alpha'), tool('Bravo'), tool('Charlie')], messages: [q1] };
      const a = await turn(url, session, first.tools, first.messages);
      // The next turn: the client loaded a tool and put it second.
      const next = { system: SYSTEM, tools: [tool('Alpha'), tool('Xray'), tool('Bravo'), tool('Charlie')], messages: [q1, { role: 'assistant', content: a.text }, { role: 'user', content: 'next' }] };
      const b = await turn(url, session, next.tools, next.messages);
      // The slot holds turn one's prompt and answer; what turn two reuses of it follows from the order the engine saw.
      const held = rendered(first, ['Alpha', 'Bravo', 'Charlie']) + a.text;
      const expected = reusableTokens(held, rendered(next, hygiene ? ['Alpha', 'Bravo', 'Charlie', 'Xray'] : ['Alpha', 'Xray', 'Bravo', 'Charlie']));
      assert.equal(b.cached, expected);
      results[String(hygiene)] = b.cached;
      if (!hygiene) assert.ok(results.true > results.false + 500, `cached with hygiene ${results.true}, without ${results.false}`);
    });
  }
});
