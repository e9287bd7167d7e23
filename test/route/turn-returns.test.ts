/**
 * Not every prompt comes back (issue 42): a single question, a
 * conversation's last turn. A node that prices every idle slot as a live
 * conversation prices a long prompt's eviction at several re-prefills of
 * conversations that mostly never return; on Mooncake's chat a third of the
 * prompts are continued. The node keeps the prompts it ran, marks those a
 * later request continues, and publishes the share that came back (`r` in
 * its `turn_gaps`); an idle slot's chance is then r·S ÷ (r·S + 1 − r).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ChainLink, PrefixChain } from '../../src/prompt/held.ts';
import { chooseSlot, curveChance, MIN_GAPS, readGapCurve, TurnGaps, type SlotView } from '../../src/route/slots.ts';

const link = (hash: string, tokens: number): ChainLink => ({ hash: hash.padEnd(16, '_'), tokens }) as ChainLink;
const SYSTEM = link('5', 500);

/**
 * A node's clock and gaps, fed `prompts` prompts of which `continued` come back `gapMs` after they ended (their next
 * turn continues them), the rest never; then `afterMs` pass.
 */
function fed(prompts: number, continued: number, gapMs = 2000, afterMs = 30_000) {
  let now = 1_000_000;
  const gaps = new TurnGaps(() => now);
  for (let i = 0; i < prompts; i++) {
    const first: PrefixChain = [SYSTEM, link(`p${i}`, 4000)] as PrefixChain;
    gaps.arrived(first, now);
    now += 500;
    gaps.ended(first, now);
    if (i < continued) {
      now += gapMs;
      const next: PrefixChain = [...first, link(`p${i}n`, 4200)] as PrefixChain;
      gaps.arrived(next, now);
      gaps.observe(gapMs);
      now += 500;
      gaps.ended(next, now);
    }
    now += 100;
  }
  now += afterMs;
  return gaps;
}

describe('the share of prompts that come back (issue 42)', () => {
  it('a node whose prompts are mostly single questions publishes that share, and prices an idle slot as that likely to be live', () => {
    // 30 conversations' first prompts, 10 continued once: 40 prompts ended, 10 came back (their next turns never do).
    const gaps = fed(30, 10);
    const curve = gaps.curve();
    assert.ok(curve.r !== undefined, `a share is published (${JSON.stringify(curve)})`);
    assert.ok(curve.r >= 0.2 && curve.r <= 0.3, `about a quarter came back: ${curve.r}`);
    // A slot idle half a second: every gap seen is longer, so without the share it is live for certain.
    const without = curveChance(500, { n: curve.n, q: curve.q });
    assert.ok(without > 0.9, `without the share an idle slot is live: ${without}`);
    assert.ok(gaps.chance(500) < 0.35, `with it, as likely as a prompt is to come back: ${gaps.chance(500)}`);
  });

  it('a node whose every prompt is continued prices idle slots as before', () => {
    let now = 1_000_000;
    const gaps = new TurnGaps(() => now);
    let chain: PrefixChain = [SYSTEM, link('c0', 1000)] as PrefixChain;
    gaps.arrived(chain, now);
    for (let turn = 1; turn <= 40; turn++) {
      now += 300;
      gaps.ended(chain, now);
      now += 1500;
      chain = [...chain, link(`c${turn}`, 1000 + turn * 100)] as PrefixChain;
      gaps.arrived(chain, now);
      gaps.observe(1500);
    }
    now += 300;
    gaps.ended(chain, now);
    now += 2000;
    const curve = gaps.curve();
    assert.ok(curve.r !== undefined && curve.r >= 0.95, `nearly every prompt came back: ${curve.r}`);
    assert.ok(gaps.chance(500) > 0.9, `an idle slot is live: ${gaps.chance(500)}`);
  });

  it('publishes no share before it has seen enough (the chance stays what the gaps say)', () => {
    const gaps = fed(MIN_GAPS, MIN_GAPS - 1, 2000, 0);
    assert.equal(gaps.curve().r, undefined, 'a handful of prompts, some still young: no share');
    assert.ok(gaps.chance(500) > 0.9);
  });

  it("prices what taking an idle slot destroys by that share: a quarter of its prompt's re-prefill, not all of it", () => {
    // One idle slot holding an 8k-token prompt that ended half a second ago, one busy.
    const slots: SlotView[] = [
      { busy: false, tokens: 8000, shared: 0, unique: 8000, idleMs: 500 },
      { busy: true, tokens: 3000, shared: 0, unique: 3000 },
    ];
    const always = chooseSlot(slots, () => 1)!;
    const learned = chooseSlot(slots, fed(30, 10).chance)!;
    assert.equal(learned.index, 0);
    assert.ok(always.evicted && learned.evicted, 'both destroy the prompt');
    const loss = (e: NonNullable<typeof always.evicted>) => e.tokens * e.chance * e.cascade;
    assert.ok(loss(learned.evicted) < 0.35 * loss(always.evicted), `expected re-prefill ${loss(learned.evicted)} against ${loss(always.evicted)}`);
  });

  it('reads the share from a report, and refuses one out of range', () => {
    assert.deepEqual(readGapCurve({ n: 9, q: [1, 2, 3], r: 0.25 }), { n: 9, q: [1, 2, 3], r: 0.25 });
    assert.deepEqual(readGapCurve({ n: 9, q: [1, 2, 3] }), { n: 9, q: [1, 2, 3] });
    assert.equal(readGapCurve({ n: 9, q: [1, 2, 3], r: 2 }), undefined);
    assert.equal(readGapCurve({ n: 9, q: [1, 2, 3], r: '0.5' }), undefined);
  });
});
