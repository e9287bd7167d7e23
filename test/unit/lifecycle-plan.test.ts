import assert from 'node:assert/strict';
import { test } from 'node:test';
import { percentile, pick, seeded, staticLayout } from '../../bench/lib/lifecycle-plan.ts';

const MIX = [
  { model: 'm1', share: 0.4 },
  { model: 'm2', share: 0.25 },
  { model: 'm3', share: 0.15 },
  { model: 'm4', share: 0.12 },
  { model: 'm5', share: 0.08 },
];

test('the hand layout for five models in three nodes with room for two: every model once, the most popular twice on two nodes, demand spread', () => {
  const layout = staticLayout(MIX, ['a', 'b', 'c'], 2);
  assert.deepEqual(layout, { a: ['m1', 'm3'], b: ['m1', 'm4'], c: ['m2', 'm5'] });
});

test('the hand layout gives spare room to the model with the most demand per copy and never two copies on one node', () => {
  // Room for 9, 4 spare: m1 (0.4/2), m1 again (0.4/3 > 0.25/2), m2 (0.25/2), m2 again (0.25/3 > 0.15/2); at most one copy per node.
  const layout = staticLayout(MIX, ['a', 'b', 'c'], 3);
  const copies = (m: string) => Object.values(layout).filter((ms) => ms.includes(m)).length;
  assert.deepEqual(MIX.map((s) => copies(s.model)), [3, 3, 1, 1, 1]);
  for (const ms of Object.values(layout)) assert.equal(new Set(ms).size, ms.length);
});

test('the hand layout refuses models that cannot all fit once', () => {
  assert.throws(() => staticLayout(MIX, ['a', 'b'], 2), /5 models do not fit once each in 2 nodes × 2/);
});

test('a seeded draw from the mix follows its shares and repeats for the same seed', () => {
  const counts: Record<string, number> = {};
  const r = seeded(7);
  for (let i = 0; i < 20_000; i++) {
    const m = pick(MIX, r());
    counts[m] = (counts[m] ?? 0) + 1;
  }
  for (const s of MIX) assert.ok(Math.abs(counts[s.model] / 20_000 - s.share) < 0.015, `${s.model}: ${counts[s.model]}`);
  const a = seeded(3);
  const b = seeded(3);
  assert.deepEqual([a(), a(), a()], [b(), b(), b()]);
});

test('percentile by nearest rank', () => {
  assert.equal(percentile([5, 1, 3, 2, 4], 50), 3);
  assert.equal(percentile([5, 1, 3, 2, 4], 100), 5);
  assert.equal(percentile([], 95), null);
});
