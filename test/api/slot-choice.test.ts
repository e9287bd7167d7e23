/**
 * Issue 25, item 7: what an operator sees of the slot choice. A node with
 * one 2-slot sim engine: two live conversations fill both slots, then a
 * third conversation must take one of them. The decision feed names the
 * slot each request took and, for the third, the tokens it evicted and how
 * long that conversation had been idle; `/metrics` counts the evicted live
 * prompt for this host; the conversation left in place stays warm.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { waitFor } from '../fakes/wait.ts';
import { startNode, type TestNode } from '../helpers/node.ts';

type Feed = { last: number; data: { slot?: number; evicted_tokens?: number; evicted_idle_ms?: number; cached_tokens: number | null }[] };

describe('the slot choice, as an operator sees it', () => {
  let t: TestNode;
  before(async () => {
    t = await startNode({
      node: { name: 'slots' },
      api: { host: '127.0.227.1' },
      models: [{ name: 'm', engine: 'sim', parallel: 2, sim: { ttft_ms: 1, prefill_ms_per_1k: 1, tokens_per_s: 2000, output_tokens: 2 } }],
    });
    await waitFor(() => t.node.backends[0].state === 'healthy', { what: 'sim healthy' });
  });
  after(() => t?.stop());

  const conv = (name: string, turns: number) => {
    const messages: { role: string; content: string }[] = [{ role: 'system', content: `Agent ${name}. ${'x'.repeat(4000)}` }];
    for (let i = 1; i <= turns; i++) {
      messages.push({ role: 'user', content: `${name} step ${i} ${'y'.repeat(800)}` });
      if (i < turns) messages.push({ role: 'assistant', content: '[simulated] simulated' });
    }
    return messages;
  };
  let seen = 0;
  async function ask(messages: unknown) {
    const r = await request(`${t.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'm', max_tokens: 2, messages }) });
    assert.equal(r.statusCode, 200, await r.body.text());
    const feed = (await (await request(`${t.url}/v1/decisions?since=${seen}`)).body.json()) as Feed;
    seen = feed.last;
    return feed.data.at(-1)!;
  }

  it('names the slot, what a placement evicted, and counts the evicted live prompt', async () => {
    const a = await ask(conv('a', 1));
    const b = await ask(conv('b', 1));
    assert.deepEqual([a.slot, b.slot].sort(), [0, 1], 'two conversations, two slots');
    assert.equal(a.evicted_tokens, undefined);
    assert.equal(b.evicted_tokens, undefined, 'the second took the empty slot');
    // Conversation a continues: its slot, warm, nothing evicted.
    const a2 = await ask(conv('a', 2));
    assert.equal(a2.slot, a.slot);
    assert.ok((a2.cached_tokens ?? 0) > 1000, `a's next turn was warm: ${a2.cached_tokens}`);
    // A third conversation: both slots hold live ones; it takes the one worth least (b's, the shorter) and says so.
    const c = await ask(conv('c', 1));
    assert.equal(c.slot, b.slot);
    assert.ok((c.evicted_tokens ?? 0) > 100, `evicted ${c.evicted_tokens}`);
    assert.ok(c.evicted_idle_ms !== undefined && c.evicted_idle_ms >= 0);
    const metrics = await (await request(`${t.url}/metrics`)).body.text();
    assert.match(metrics, /viiwork_evicted_prompts_total\{model="m",host="slots"\} 1\b/);
    // a is still warm in its slot.
    const a3 = await ask(conv('a', 3));
    assert.equal(a3.slot, a.slot);
    assert.ok((a3.cached_tokens ?? 0) > 1300, `a stayed warm (its whole previous prompt, about 1,430 tokens): ${a3.cached_tokens}`);
  });
});
