/**
 * Priority on a real node (SPEC section 12): batch requests wait up to
 * routing.batch_queue_timeout while interactive ones keep queue_timeout,
 * and a freed slot goes to an interactive waiter before batch ones that
 * came first; a priority header that names none is 400.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { waitFor } from '../fakes/wait.ts';
import { startNode, type TestNode } from '../helpers/node.ts';

async function chat(url: string, headers: Record<string, string>, content = 'hi') {
  const r = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: 'slow', messages: [{ role: 'user', content }], max_tokens: 4 }),
  });
  return { status: r.statusCode, text: await r.body.text(), done: Date.now() };
}

describe('priority bands on one node', () => {
  let n: TestNode;
  before(async () => {
    n = await startNode({
      routing: { queue_timeout: '400ms', batch_queue_timeout: '60s' },
      // One slot, and each answer takes a while: requests behind it queue.
      models: [{ name: 'slow', engine: 'sim', parallel: 1, sim: { ttft_ms: 600, prefill_ms_per_1k: 1, tokens_per_s: 100, output_tokens: 4 } }],
    });
    await waitFor(async () => (await chat(n.url, {})).status === 200, { timeoutMs: 20_000, what: 'slow serves' });
  });
  after(() => n?.stop());

  it('an interactive request times out with 429 where a batch one that came with it waits and is served', async () => {
    const busy = chat(n.url, {}, 'holds the slot');
    await waitFor(() => !n.node.slots.hasFree('slow'), { what: 'the slot busy' });
    const batch = chat(n.url, { 'x-viiwork-priority': 'batch' }, 'batch');
    const inter = chat(n.url, {}, 'interactive');
    const [i, b] = await Promise.all([inter, batch]);
    await busy;
    assert.equal(i.status, 429, i.text);
    assert.match(i.text, /queue_timeout/);
    assert.equal(b.status, 200, b.text);
  });

  it('a freed slot goes to the interactive waiter before batch waiters that came first', async (t) => {
    const n = await startNode({
      routing: { queue_timeout: '60s' },
      models: [{ name: 'slow', engine: 'sim', parallel: 1, sim: { ttft_ms: 300, prefill_ms_per_1k: 1, tokens_per_s: 100, output_tokens: 4 } }],
    });
    t.after(() => n.stop());
    await waitFor(async () => (await chat(n.url, {})).status === 200, { timeoutMs: 20_000, what: 'slow serves' });
    const busy = chat(n.url, {}, 'holds the slot');
    await waitFor(() => !n.node.slots.hasFree('slow'), { what: 'the slot busy' });
    const batches = [1, 2, 3].map((i) => chat(n.url, { 'x-viiwork-priority': 'batch' }, `batch ${i}`));
    await waitFor(() => n.node.queues.depth('slow') >= 3, { what: 'batches queued' });
    const inter = chat(n.url, { 'x-viiwork-priority': 'interactive' }, 'interactive');
    await waitFor(() => n.node.queues.depth('slow') >= 4, { what: 'interactive queued' });
    await busy;
    const i = await inter;
    const b = await Promise.all(batches);
    assert.equal(i.status, 200, i.text);
    assert.ok(b.every((x) => x.status === 200));
    assert.ok(b.every((x) => x.done >= i.done), 'every batch request ended after the interactive one');
  });

  it('refuses a priority that is not one with 400', async () => {
    const r = await chat(n.url, { 'x-viiwork-priority': 'urgent' });
    assert.equal(r.status, 400);
    assert.match(r.text, /invalid_priority/);
  });
});

describe('room kept for interactive turns on one node (routing.interactive_reserve)', () => {
  // Two slots; an answer is 200 tokens at 40 tokens/s (5 s) unless `max_tokens` cuts it short.
  const sim = { ttft_ms: 50, prefill_ms_per_1k: 1, tokens_per_s: 40, output_tokens: 200 };
  async function ask(url: string, headers: Record<string, string>, content: string, maxTokens: number) {
    const r = await request(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ model: 'two', messages: [{ role: 'user', content }], max_tokens: maxTokens }),
    });
    return { status: r.statusCode, text: await r.body.text(), done: Date.now() };
  }
  const BATCH = { 'x-viiwork-priority': 'batch' };

  /**
   * A two-slot node (`routing` added) after one interactive turn, with a long batch job running; `second`: a short batch
   * job sent then, and (unless `queued` is false) seen waiting in the queue.
   */
  async function behindLongBatch(t: { after(fn: () => unknown): void }, routing: Record<string, unknown>, queued = true) {
    const n = await startNode({ routing: { queue_timeout: '60s', ...routing }, models: [{ name: 'two', engine: 'sim', parallel: 2, sim }] });
    t.after(() => n.stop());
    assert.equal((await ask(n.url, {}, 'a turn', 1)).status, 200);
    const long = ask(n.url, BATCH, 'long batch job', 200);
    await waitFor(() => n.node.slots.freeFor('two', 'chat') === 1, { what: 'the long batch job running' });
    const second = ask(n.url, BATCH, 'second batch job', 1);
    if (queued) await waitFor(() => n.node.queues.depth('two') === 1, { what: 'the second batch job queued' });
    return { n, long, second };
  }

  it('after an interactive turn, a batch request does not take the last free slot; the next interactive turn does, at once', async (t) => {
    const { n, long, second: held } = await behindLongBatch(t, {});
    assert.equal(n.node.slots.freeFor('two', 'chat'), 1, 'a slot stays free while batch waits');
    const turn = await ask(n.url, {}, 'next turn', 1);
    assert.equal(turn.status, 200, turn.text);
    assert.equal(n.node.queues.depth('two'), 1, 'the batch job still waits: the turn took the free slot without queueing');
    const [l, h] = await Promise.all([long, held]);
    assert.equal(l.status, 200);
    assert.equal(h.status, 200);
    assert.ok(turn.done < h.done, 'the interactive turn ended before the batch job that came first');
  });

  it('the room lapses interactive_reserve_for after the last interactive turn: a waiting batch job then runs', async (t) => {
    const { long, second: held } = await behindLongBatch(t, { interactive_reserve_for: '1500ms' });
    const h = await held;
    const l = await long;
    assert.equal(h.status, 200);
    assert.ok(h.done < l.done, 'the second batch job ran beside the first once the room lapsed, not after it');
  });

  it('with interactive_reserve 0, batch takes every slot', async (t) => {
    const { long, second: pending } = await behindLongBatch(t, { interactive_reserve: 0 }, false);
    const second = await pending;
    assert.equal(second.status, 200);
    assert.ok(second.done < (await long).done);
  });
});
