import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { blend, estimate, median, publish, twoSignificant, type Sample } from '../../src/perf/estimator.ts';
import { PerfScores } from '../../src/perf/scores.ts';
import { tempDir } from '../helpers/node.ts';

function samples(overhead: number, rate: number, now: number, tokens: number[]): Sample[] {
  return tokens.map((t, i) => ({ at: now - i * 1000, promptTokens: t, ttftMs: overhead + (rate * t) / 1000 }));
}

describe('score estimator', () => {
  it('recovers overhead and rate within 1% from mixed prompts', () => {
    const now = 1_000_000;
    const s = samples(140, 95, now, [20, 100, 300, 480, 50, 900, 2000, 4000, 1500, 700]);
    const e = estimate(s, now);
    assert.ok(Math.abs(e.ttft_overhead_ms! - 140) / 140 < 0.01, `overhead ${e.ttft_overhead_ms}`);
    assert.ok(Math.abs(e.prefill_ms_per_1k! - 95) / 95 < 0.01, `rate ${e.prefill_ms_per_1k}`);
    assert.equal(e.nOverhead, 5);
    assert.equal(e.nRate, 5);
  });

  it('uses medians, so one outlier does not move the estimate', () => {
    const now = 5_000_000;
    const s = samples(100, 0, now, [10, 10, 10, 10]);
    s.push({ at: now, promptTokens: 10, ttftMs: 9000 });
    assert.equal(estimate(s, now).ttft_overhead_ms, 100);
    assert.equal(median([3, 1, 2]), 2);
    assert.equal(median([4, 1, 2, 3]), 2.5);
    assert.equal(median([]), undefined);
  });

  it('forgets samples older than ten minutes', () => {
    const now = 10_000_000;
    const old = samples(500, 0, now - 11 * 60_000, [10, 10, 10]);
    const fresh = samples(100, 0, now, [10]);
    assert.equal(estimate([...old, ...fresh], now).ttft_overhead_ms, 100);
    assert.equal(estimate(old, now).ttft_overhead_ms, undefined);
  });

  it('blends with the baseline by n/(n+5)', () => {
    assert.equal(blend(200, 5, 100), 150);
    assert.equal(blend(200, 0, 100), 100);
    assert.equal(blend(200, 45, 100), 190);
    assert.equal(blend(undefined, 0, 100), 100);
    assert.equal(blend(200, 3, undefined), 200);
  });

  it('publishes two significant digits', () => {
    assert.equal(twoSignificant(143), 140);
    assert.equal(twoSignificant(95.3), 95);
    assert.equal(twoSignificant(0.1234), 0.12);
    assert.equal(twoSignificant(1049), 1000);
    assert.equal(twoSignificant(1050), 1100);
    const p = publish({ ttft_overhead_ms: 143.7, prefill_ms_per_1k: 97.2, nOverhead: 10, nRate: 10 }, {});
    assert.deepEqual(p, { ttft_overhead_ms: 140, prefill_ms_per_1k: 97, perf_samples: 20 });
  });

  it('keeps the baseline across a restart and publishes it with no samples', () => {
    const dir = tempDir();
    let clock = 1_000_000;
    const a = new PerfScores(dir, () => clock);
    for (let i = 0; i < 10; i++) a.record('m', 100, 200 + (40 * 100) / 1000);
    for (let i = 0; i < 10; i++) a.record('m', 2000, 200 + 40 * 2);
    a.save();
    clock += 1000;
    const b = new PerfScores(dir, () => clock);
    const p = b.published('m');
    assert.equal(p.perf_samples, 0);
    assert.equal(p.ttft_overhead_ms, 200);
    assert.equal(p.prefill_ms_per_1k, 40);
  });
});
