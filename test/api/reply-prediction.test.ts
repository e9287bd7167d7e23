/**
 * Issue 25, item 6, on a real node with the sim engine (whose slots hold the
 * prompt and the reply they generated, as llama-server's do): over a
 * multi-turn conversation that echoes each answer, the decision feed's
 * predicted cached tokens match the engine's own count within 10%, in each
 * dialect (chat streamed and whole, Messages streamed, Responses whole),
 * since the executor records the reply with the prompt it cached. The reply
 * is long (about 190 tokens of a prompt of 600–1,000): a record that stopped
 * before it would miss by more than 10%.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { waitFor } from '../fakes/wait.ts';
import { startNode, type TestNode } from '../helpers/node.ts';

type Feed = { last: number; data: { route: string; predicted_cached?: number | null; cached_tokens?: number | null }[] };

const SYSTEM = `You are the reply-prediction test's agent. ${'Follow the plan. '.repeat(100)}`;
const user = (i: number) => `step ${i}: ${'do the next thing '.repeat(10)}`;

/** Server-sent events' data payloads, parsed. */
function events(text: string): any[] {
  return text
    .split(/\n\n/)
    .map((e) => e.split('\n').find((l) => l.startsWith('data: '))?.slice(6))
    .filter((d): d is string => d !== undefined && d !== '[DONE]')
    .map((d) => JSON.parse(d));
}

/** Each dialect: the path, a body for the conversation so far, the reply read from an answer, and how the client echoes it. */
const dialects = [
  {
    name: 'chat, streamed',
    path: '/v1/chat/completions',
    body: (turns: unknown[]) => ({ model: 'm', stream: true, messages: [{ role: 'system', content: SYSTEM }, ...turns] }),
    user: (i: number) => ({ role: 'user', content: user(i) }),
    reply: (text: string) => events(text).map((e) => e.choices?.[0]?.delta?.content ?? '').join(''),
    echo: (r: string) => ({ role: 'assistant', content: r }),
  },
  {
    name: 'chat, whole',
    path: '/v1/chat/completions',
    body: (turns: unknown[]) => ({ model: 'm', messages: [{ role: 'system', content: SYSTEM }, ...turns] }),
    user: (i: number) => ({ role: 'user', content: user(i) }),
    reply: (text: string) => JSON.parse(text).choices[0].message.content as string,
    echo: (r: string) => ({ role: 'assistant', content: r }),
  },
  {
    name: 'Messages, streamed',
    path: '/v1/messages',
    body: (turns: unknown[]) => ({ model: 'm', max_tokens: 1000, stream: true, system: SYSTEM, messages: turns }),
    user: (i: number) => ({ role: 'user', content: [{ type: 'text', text: user(i) }] }),
    reply: (text: string) => events(text).map((e) => (e.type === 'content_block_delta' && e.delta?.type === 'text_delta' ? e.delta.text : '')).join(''),
    echo: (r: string) => ({ role: 'assistant', content: [{ type: 'text', text: r }] }),
  },
  {
    name: 'Responses, whole',
    path: '/v1/responses',
    body: (turns: unknown[]) => ({ model: 'm', instructions: SYSTEM, input: turns }),
    user: (i: number) => ({ role: 'user', content: user(i) }),
    reply: (text: string) => (JSON.parse(text).output as any[]).filter((o) => o.type === 'message').flatMap((o) => o.content.map((c: any) => c.text ?? '')).join(''),
    echo: (r: string) => ({ type: 'message', role: 'assistant', content: [{ type: 'output_text', text: r }] }),
  },
];

describe('predicted cached tokens reach through the reply (issue 25, item 6)', () => {
  let t: TestNode;
  before(async () => {
    t = await startNode({
      node: { name: 'replies' },
      models: [{ name: 'm', engine: 'sim', parallel: 2, sim: { ttft_ms: 1, prefill_ms_per_1k: 1, tokens_per_s: 50_000, output_tokens: 120 } }],
    });
    await waitFor(() => t.node.backends[0].state === 'healthy', { what: 'sim healthy' });
  });
  after(() => t?.stop());

  let seen = 0;
  async function turn(path: string, body: unknown): Promise<{ text: string; row: Feed['data'][number] }> {
    const r = await request(`${t.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const text = await r.body.text();
    assert.equal(r.statusCode, 200, text);
    const feed = (await (await request(`${t.url}/v1/decisions?since=${seen}`)).body.json()) as Feed;
    seen = feed.last;
    assert.equal(feed.data.length, 1, 'one decision per request');
    return { text, row: feed.data[0] };
  }

  for (const d of dialects) {
    it(`${d.name}: every later turn's prediction is within 10% of the engine's count`, async () => {
      const turns: unknown[] = [];
      for (let i = 1; i <= 4; i++) {
        turns.push(d.user(i));
        const { text, row } = await turn(d.path, d.body(turns));
        const reply = d.reply(text);
        assert.match(reply, /simulated/, 'the answer carries the reply');
        if (i > 1) {
          const cached = row.cached_tokens ?? 0;
          // The reply is about 200 tokens (120 words), a sixth to a third of the prompt: missing it is off by more than 10%.
          assert.ok(cached > 400, `turn ${i}: the engine reused the conversation (${cached} cached)`);
          assert.ok(Math.abs((row.predicted_cached ?? 0) - cached) <= 0.1 * cached, `turn ${i}: predicted ${row.predicted_cached}, engine ${cached}`);
        }
        turns.push(d.echo(reply));
      }
    });
  }
});
