/**
 * GET /v1/history on a real node (SPEC section 10): after requests, its own
 * series carry them; bad queries get a 400 in the OpenAI shape and the node
 * goes on answering.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { startNode, type TestNode } from '../helpers/node.ts';

async function get(url: string) {
  const r = await request(url);
  return { status: r.statusCode, json: (await r.body.json()) as any };
}

describe('GET /v1/history on a node', () => {
  let t: TestNode;
  before(async () => {
    t = await startNode({
      node: { name: 'hist' },
      models: [{ name: 'chat-sim', engine: 'sim', parallel: 2, workloads: ['chat'], sim: { ttft_ms: 20, prefill_ms_per_1k: 1, tokens_per_s: 2000, output_tokens: 8 } }],
    });
  });
  after(() => t.stop());

  it('shows the requests it served, their first-token times, tokens and the slots', async () => {
    for (let i = 0; i < 6; i++) {
      const r = await request(`${t.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'chat-sim', stream: i % 2 === 0, messages: [{ role: 'user', content: `hello ${i}` }] }),
      });
      assert.equal(r.statusCode, 200);
      await r.body.text();
    }
    const { status, json } = await get(`${t.url}/v1/history?series=requests,ttft_p50,tokens_in,tokens_out,slots,slots_busy,members_alive&since=-15m`);
    assert.equal(status, 200);
    assert.equal(json.step_ms, 10_000);
    const one = (name: string, model: string | null = 'chat-sim') => json.series.find((s: any) => s.name === name && s.node === 'hist' && s.model === model);
    const total = (name: string) => one(name).points.reduce((n: number, p: [number, number]) => n + p[1], 0);
    assert.ok(total('requests') > 0, 'the requests are counted');
    assert.ok(one('ttft_p50').points.every((p: [number, number]) => p[1] >= 15 && p[1] < 2000), JSON.stringify(one('ttft_p50')));
    assert.ok(total('tokens_in') > 0 && total('tokens_out') > 0, 'tokens in and out are counted');
    assert.equal(one('slots').points.at(-1)[1], 2, 'two slots');
    assert.equal(one('slots_busy').points.at(-1)[1], 0, 'none busy now');
    assert.equal(one('members_alive', null).points.at(-1)[1], 1, 'it sees itself');
    for (const s of json.series) for (const [ms] of s.points) assert.equal(ms % 10_000, 0, 'points sit on 10 s steps');
  });

  it('answers bad queries with a 400 that names the fix, and goes on answering', async () => {
    for (const [q, pattern] of [
      ['series=nope', /unknown series "nope"/],
      ['since=-12h', /6 h this node keeps/],
      ['since=-1000000000000h', /6 h this node keeps/],
      ['since=99999999999999', /in the future/],
      ['since=%ff', /is not a span back from now/],
    ] as const) {
      const r = await get(`${t.url}/v1/history?${q}`);
      assert.equal(r.status, 400, q);
      assert.equal(r.json.error.type, 'invalid_request_error');
      assert.equal(r.json.error.code, 'invalid_history_query');
      assert.match(r.json.error.message, pattern);
    }
    assert.equal((await get(`${t.url}/v1/history`)).status, 200);
  });
});
