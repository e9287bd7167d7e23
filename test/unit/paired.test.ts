/**
 * The agents trace's paired header-less ratio (bench/lib/paired.ts): two runs
 * that trade which conversations carry X-Session-Id, each class's mean TTFT
 * weighted by its answered turns across both runs.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { pairedHeaderless, type RoutingRunDoc } from '../../bench/lib/paired.ts';

const run = (headers: string, seed: number, header: [number, number], noheader: [number, number], load = 0.8): RoutingRunDoc => ({
  settings: { seed, session_headers: headers },
  results: [{ load, arms: [{ arm: 'viiwork', classes: { conv_header: { ok: header[0], ttft_mean_ms: header[1] }, conv_noheader: { ok: noheader[0], ttft_mean_ms: noheader[1] } } }, { arm: 'sticky', classes: {} }] }],
});

describe('paired header-less ratio', () => {
  it('weights each run’s class mean by its turns: the same conversations measured both ways', () => {
    // As drawn: 60 headed turns at 300 ms, 90 header-less at 330. Swapped: those 90 now headed at 310, the 60 without at 320.
    const rows = pairedHeaderless(run('as drawn', 1, [60, 300], [90, 330]), run('swapped', 1, [90, 310], [60, 320]));
    assert.equal(rows.length, 1, 'an arm without the two classes is left out');
    const [r] = rows;
    assert.equal(r.arm, 'viiwork');
    assert.equal(r.headerless_ms, (90 * 330 + 60 * 320) / 150);
    assert.equal(r.headed_ms, (60 * 300 + 90 * 310) / 150);
    assert.equal(r.ratio, Math.round(((90 * 330 + 60 * 320) / (60 * 300 + 90 * 310)) * 100) / 100);
    assert.deepEqual(r.turns, { headerless: 150, headed: 150 });
  });

  it('refuses runs that are not a pair, saying why', () => {
    assert.throws(() => pairedHeaderless(run('as drawn', 1, [1, 1], [1, 1]), run('as drawn', 1, [1, 1], [1, 1])), /"as drawn" and the other "swapped"/);
    assert.throws(() => pairedHeaderless(run('as drawn', 1, [1, 1], [1, 1]), run('swapped', 2, [1, 1], [1, 1])), /different seeds/);
    assert.throws(() => pairedHeaderless(run('as drawn', 1, [1, 1], [1, 1]), run('swapped', 1, [1, 1], [1, 1], 0.5)), /different loads/);
  });
});
