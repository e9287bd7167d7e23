/** TTFT scores end to end: measured on real requests, published in /v1/capacity, kept across a restart. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { request } from 'undici';
import { startNode, tempDir } from '../helpers/node.ts';

async function capacityOf(url: string, model: string) {
  const res = await request(`${url}/v1/capacity`);
  const doc = (await res.body.json()) as { models: { name: string; ttft_overhead_ms?: number; prefill_ms_per_1k?: number; perf_samples: number }[] };
  return doc.models.find((m) => m.name === model)!;
}

/** Each prompt starts differently, so the engine's prompt cache cannot serve it. */
let nth = 0;
async function chat(url: string, model: string, chars: number, stream: boolean) {
  const content = `${++nth} ${'x'.repeat(chars)}`;
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, stream, max_tokens: 2, messages: [{ role: 'user', content }] }),
  });
  assert.equal(res.statusCode, 200);
  await res.body.text();
}

const fast = { ttft_ms: 20, prefill_ms_per_1k: 10, tokens_per_s: 1000, output_tokens: 2 };
const slow = { ttft_ms: 80, prefill_ms_per_1k: 40, tokens_per_s: 1000, output_tokens: 2 };

describe('TTFT scores', () => {
  it('counts 40 samples after 20 short and 20 long prompts, prices a 4x slower engine higher, and keeps the baseline across a restart', async () => {
    const stateDir = tempDir();
    const doc = {
      models: [
        { name: 'fast', engine: 'sim', parallel: 4, sim: fast },
        { name: 'slow', engine: 'sim', parallel: 4, sim: slow },
      ],
    };
    const t = await startNode(doc, { stateDir });
    let published: Record<string, Awaited<ReturnType<typeof capacityOf>>> = {};
    try {
      for (const model of ['fast', 'slow']) {
        for (let i = 0; i < 20; i++) await chat(t.url, model, 200, i % 2 === 0); // ~60 tokens
        for (let i = 0; i < 20; i++) await chat(t.url, model, 8000, i % 2 === 0); // ~2000 tokens
      }
      for (const model of ['fast', 'slow']) published[model] = await capacityOf(t.url, model);
      assert.equal(published.fast.perf_samples, 40);
      assert.equal(published.slow.perf_samples, 40);
      assert.ok(published.slow.ttft_overhead_ms! > published.fast.ttft_overhead_ms!, JSON.stringify(published));
      assert.ok(published.slow.prefill_ms_per_1k! > published.fast.prefill_ms_per_1k!, JSON.stringify(published));
    } finally {
      await t.stop();
    }
    const again = await startNode(doc, { stateDir });
    try {
      for (const model of ['fast', 'slow']) {
        const m = await capacityOf(again.url, model);
        assert.equal(m.perf_samples, 0);
        assert.equal(m.ttft_overhead_ms, published[model].ttft_overhead_ms);
        assert.equal(m.prefill_ms_per_1k, published[model].prefill_ms_per_1k);
      }
    } finally {
      await again.stop();
    }
  });
});
