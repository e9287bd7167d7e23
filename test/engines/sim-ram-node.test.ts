/**
 * Issue 41, items 2 and 5 through a node: the sim engine with `sim.cache_ram`
 * behaves as today's llama-server (a conversation pushed out of its slot comes
 * back from RAM), and the node's cache model predicts it, tells the decision
 * feed and /metrics that the hit came from RAM, not from the slot; without a
 * pool, the same turns are predicted and served cold.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { waitFor } from '../fakes/wait.ts';
import { startNode, type TestNode } from '../helpers/node.ts';

type Msg = { role: string; content: string };

const SIM = { ttft_ms: 1, prefill_ms_per_1k: 1, tokens_per_s: 5000, output_tokens: 4 };

for (const [pool, host] of [[50_000, '127.0.123.1'], [0, '127.0.123.2']] as const) {
  describe(`a sim node with one slot, sim.cache_ram ${pool}`, () => {
    let t: TestNode;
    let seq = 0;
    before(async () => {
      t = await startNode({ api: { host }, models: [{ name: 'sim', engine: 'sim', parallel: 1, sim: { ...SIM, cache_ram: pool } }] });
      await waitFor(() => t.node.backends[0].state === 'healthy', { what: 'sim healthy' });
    });
    after(() => t?.stop());

    async function ask(messages: Msg[]) {
      const r = await request(`${t.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'sim', messages }) });
      const doc = (await r.body.json()) as { choices: { message: { content: string } }[]; usage: { prompt_tokens: number; prompt_tokens_details: { cached_tokens: number } } };
      const feed = (await (await request(`${t.url}/v1/decisions?since=${seq}`)).body.json()) as { last: number; data: { predicted_cached: number; cached_tokens: number; restored_tokens?: number }[] };
      seq = feed.last;
      return { doc, d: feed.data.at(-1)! };
    }

    it(pool ? 'a conversation pushed out by another is restored from RAM: predicted, served, and told apart from a slot hit' : 'a conversation pushed out by another runs cold, as predicted', async () => {
      const a: Msg[] = [{ role: 'system', content: 'Answer about rivers. '.repeat(20) }, { role: 'user', content: 'Which is longest?' }];
      const first = await ask(a);
      await ask([{ role: 'system', content: 'Answer about mountains. '.repeat(20) }, { role: 'user', content: 'Which is highest?' }]);
      const { doc, d } = await ask([...a, { role: 'assistant', content: first.doc.choices[0].message.content }, { role: 'user', content: 'And the widest?' }]);
      const engine = doc.usage.prompt_tokens_details.cached_tokens;
      assert.ok(Math.abs(d.predicted_cached - engine) <= 0.1 * doc.usage.prompt_tokens, `predicted ${d.predicted_cached}, engine ${engine}`);
      const metrics = await (await request(`${t.url}/metrics`)).body.text();
      const restored = /viiwork_restored_tokens_total\{[^}]*\} (\d+)/.exec(metrics);
      if (pool) {
        assert.ok(engine > 0.5 * doc.usage.prompt_tokens, `engine reused ${engine} of ${doc.usage.prompt_tokens}`);
        assert.ok((d.restored_tokens ?? 0) > 0.5 * doc.usage.prompt_tokens, 'the feed tells the hit came from RAM');
        assert.ok(restored && Number(restored[1]) > 0, 'and /metrics counts it');
      } else {
        assert.ok(engine < 0.1 * doc.usage.prompt_tokens, `engine reused ${engine}`);
        assert.equal(d.restored_tokens, undefined);
        assert.equal(restored, null);
      }
    });
  });
}
