/**
 * Issue 42, item 2: most conversations of real chat never come back (in
 * Mooncake's trace a first turn is followed by a second 27% of the time, a
 * sixth by a seventh 79%). An idle slot's return chance is its conversation's
 * share of returns for the turns it has held in place, joined with the gaps
 * between turns (SPEC 9.6): a new conversation takes the slot of the one
 * least likely to come back. The executor counts its conversations' turns and
 * publishes the shares with its gaps (`turn_gaps.r`); its slots say their
 * turns on the wire; the entry prices with both as the executor chooses.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decodeSlots, encodeSlots } from '../../src/capacity/digest.ts';
import { cacheModel } from '../../src/engines/cache-model.ts';
import { RecentRoutes } from '../../src/dispatch/entry/recent-routes.ts';
import type { CacheDigest, PrefixChain, SlotHold } from '../../src/prompt/held.ts';
import { chooseSlot, curveChance, gapCurve, readGapCurve, MIN_PLACED, RETURN_SHARES, returnShares, SHARE_PRIOR, TurnGaps, withReturnShare, type SlotView } from '../../src/route/slots.ts';
import type { Candidate, HostView } from '../../src/route/types.ts';
import { warmCandidates } from '../../src/route/warmth.ts';

const H = (c: string) => c.repeat(16);
const slot = (over: Partial<SlotView>): SlotView => ({ busy: false, tokens: 0, shared: 0, unique: 0, idleMs: 0, ...over });
/** Placements: `n[k - 1]` of k turns. */
const placements = (...n: number[]): number[] => n.flatMap((count, k) => new Array<number>(count).fill(k + 1));

describe("an idle conversation's return chance by the turns it has held (issue 42, item 2)", () => {
  it('the share of returns is the placements one turn further against those of this many, none under MIN_PLACED placements', () => {
    assert.equal(returnShares([]), undefined);
    assert.equal(returnShares(new Array<number>(MIN_PLACED - 1).fill(1)), undefined, 'a handful of conversations: priced as before');
    // From MIN_PLACED on, shares are published, the prior giving way as placements outweigh it.
    assert.equal(returnShares(new Array<number>(MIN_PLACED).fill(1))![0], Math.round((SHARE_PRIOR / (MIN_PLACED + SHARE_PRIOR)) * 100) / 100);
    assert.ok(returnShares(new Array<number>(32).fill(1))![0] < 0.2);
    // 100 first turns, 27 second, 11 third: about a quarter of first turns and 40% of second ones came back.
    const r = returnShares(placements(100, 27, 11))!;
    assert.equal(r.length, RETURN_SHARES);
    assert.equal(r[0], Math.round(((27 + SHARE_PRIOR) / (100 + SHARE_PRIOR)) * 100) / 100);
    assert.equal(r[1], Math.round(((11 + SHARE_PRIOR) / (27 + SHARE_PRIOR)) * 100) / 100);
    assert.ok(r[0] < 0.35 && r[1] > r[0], `${r}`);
    // None seen of a turn count: its share is the prior, every one returns.
    assert.equal(r[4], 1);
    // The last share counts everything from RETURN_SHARES turns up: 20 at 6, 20 at 7 and more → 20 of 40 back.
    const deep = returnShares([...new Array<number>(20).fill(RETURN_SHARES), ...new Array<number>(20).fill(RETURN_SHARES + 3)])!;
    assert.equal(deep[RETURN_SHARES - 1], Math.round(((20 + SHARE_PRIOR) / (40 + SHARE_PRIOR)) * 100) / 100);
  });

  it('joins the share with the gaps: those that return and have not yet, against those that never will', () => {
    assert.equal(withReturnShare(0.6, undefined, 1), 0.6, 'no shares published: as before');
    assert.equal(withReturnShare(0.6, [0.25], undefined), 0.6, 'turns not said: as before');
    assert.equal(withReturnShare(1, [0.25, 0.5], 1), 0.25);
    assert.ok(Math.abs(withReturnShare(0.5, [0.25, 0.5], 1) - 0.125 / 0.875) < 1e-9);
    assert.equal(withReturnShare(1, [0.25, 0.5], 9), 0.5, 'past the last share, the last');
    assert.equal(withReturnShare(0, [0.25], 1), 0, 'dead by the gaps: dead');
  });

  it('a new conversation takes the slot of the conversation least likely to return: one turn over six, then by idle time', () => {
    const curve = gapCurve(Array.from({ length: 32 }, (_, i) => 500 + (i % 6) * 500), [0.25, 0.4, 0.55, 0.6, 0.65, 0.8]);
    const chance = (idleMs: number, turns?: number) => curveChance(idleMs, curve, turns);
    const slots = [slot({ tokens: 8000, unique: 8000, idleMs: 900, turns: 6 }), slot({ tokens: 8000, unique: 8000, idleMs: 900, turns: 1 })];
    const pick = chooseSlot(slots, chance)!;
    assert.equal(pick.index, 1);
    assert.equal(pick.evicted!.chance, chance(900, 1));
    assert.ok(pick.evicted!.chance < 0.3);
    // Without shares both are as likely to return: the tie goes to the one idle longer.
    const plain = gapCurve(Array.from({ length: 32 }, (_, i) => 500 + (i % 6) * 500));
    const older = [slot({ tokens: 8000, unique: 8000, idleMs: 1200, turns: 6 }), slot({ tokens: 8000, unique: 8000, idleMs: 900, turns: 1 })];
    assert.equal(chooseSlot(older, (ms, t) => curveChance(ms, plain, t))!.index, 0);
    assert.equal(chooseSlot(older, chance)!.index, 1, 'with shares, the one-turn conversation though idle less');
  });

  it('the shares travel with the gaps in the report, and a malformed list is not read', () => {
    const c = gapCurve([100, 200, 300], [0.3, 0.5]);
    assert.deepEqual(readGapCurve(JSON.parse(JSON.stringify(c))), { n: 3, q: [100, 200, 300], r: [0.3, 0.5] });
    assert.deepEqual(readGapCurve({ n: 3, q: [100, 200, 300], r: [1.5] }), { n: 3, q: [100, 200, 300] });
    assert.deepEqual(readGapCurve({ n: 3, q: [100, 200, 300], r: 'x' }), { n: 3, q: [100, 200, 300] });
    assert.deepEqual(readGapCurve({ n: 3, q: [100, 200, 300], r: new Array(RETURN_SHARES + 1).fill(0.5) }), { n: 3, q: [100, 200, 300] });
  });

  it("a node's published curve carries the shares of its placements, and its own chance reads them", () => {
    const g = new TurnGaps();
    for (let i = 0; i < 32; i++) g.observe(1000);
    assert.equal(g.curve().r, undefined);
    for (const t of placements(40, 4)) g.placed(t);
    const r = g.curve().r!;
    assert.equal(r[0], Math.round(((4 + SHARE_PRIOR) / (40 + SHARE_PRIOR)) * 100) / 100);
    assert.equal(g.chance(100, 1), curveChance(100, g.curve(), 1));
    assert.ok(g.chance(100, 1) < g.chance(100, 2));
    g.placed(0);
    g.placed(Number.NaN);
    assert.deepEqual(g.curve().r, r, 'no placement of no turns');
  });
});

describe('a slot says the turns its conversation has had on the backend', () => {
  /** Chains named by their messages: "s", "s/a", ... each message 100 tokens. */
  const chain = (messages: string[]): PrefixChain => messages.map((_, i) => ({ hash: hashOf(messages.slice(0, i + 1)), tokens: (i + 1) * 100 }));

  it('counts 1, 2, 3 as a conversation continues, 1 for another conversation, on where it left off in any slot, and tells each placement', () => {
    const told: number[] = [];
    const m = cacheModel({ kind: 'chosen', slots: 1, choose: (s) => chooseSlot(s, () => 1), onPlaced: (t) => told.push(t) });
    const turns = () => m.slotStates!()[0].turns;
    let clock = 0;
    const run = (c: PrefixChain) => {
      const t = m.begin(c, ++clock, clock);
      m.finish(t, { processed: true, cachedTokens: t.predicted }, ++clock, clock);
    };
    run(chain(['s', 'a']));
    assert.equal(turns(), 1);
    run(chain(['s', 'a', 'x', 'b']));
    run(chain(['s', 'a', 'x', 'b', 'y', 'c']));
    assert.equal(turns(), 3);
    run(chain(['t', 'q']));
    assert.equal(turns(), 1);
    // The conversation comes back to the slot the other took: still its fourth turn, not a new conversation.
    run(chain(['s', 'a', 'x', 'b', 'y', 'c', 'z', 'd']));
    assert.equal(turns(), 4);
    assert.deepEqual(told, [1, 2, 3, 1, 4]);
  });

  it("a session's slot says no turns (its client says it comes back: priced as sure to), and its placements are not counted", () => {
    const told: number[] = [];
    const m = cacheModel({ kind: 'chosen', slots: 2, choose: (s) => chooseSlot(s, () => 1), onPlaced: (t) => told.push(t) });
    let clock = 0;
    const run = (c: PrefixChain, session: boolean) => {
      const t = m.begin(c, ++clock, clock, undefined, undefined, session);
      m.finish(t, { processed: true, cachedTokens: t.predicted }, ++clock, clock);
      return m.slotStates!()[t.slot!];
    };
    assert.equal(run(chain(['s', 'a']), true).turns, undefined);
    assert.equal(run(chain(['s', 'a', 'x', 'b']), true).turns, undefined);
    assert.equal(run(chain(['t', 'q']), false).turns, 1);
    // The session's turn without its key (a client that dropped it) is still its conversation's third.
    assert.equal(run(chain(['s', 'a', 'x', 'b', 'y', 'c']), false).turns, 3);
    assert.deepEqual(told, [1, 3]);
  });

  it('a conversation sharing only the head (tools and system) with another is a new one', () => {
    const m = cacheModel({ kind: 'chosen', slots: 2, choose: (s) => chooseSlot(s, () => 1) });
    let clock = 0;
    const run = (c: PrefixChain) => {
      const t = m.begin(c, ++clock, clock, 0);
      m.finish(t, { processed: true, cachedTokens: t.predicted }, ++clock, clock);
      return m.slotStates!()[t.slot!].turns;
    };
    assert.equal(run(chain(['s', 'a'])), 1);
    assert.equal(run(chain(['s', 'b'])), 1);
    assert.equal(run(chain(['s', 'b', 'y', 'c'])), 2);
  });

  it('on the wire as the ninth element, the head and the link before the last padded when absent; an older reader reads the rest', () => {
    const slots: SlotHold[] = [
      { last: { hash: H('a'), tokens: 900 }, head: { hash: H('b'), tokens: 300 }, prev: { hash: H('d'), tokens: 800 }, unique: 600, busy: false, idleSince: 1000, turns: 4 },
      { last: { hash: H('c'), tokens: 400 }, unique: 400, busy: false, idleSince: 1000, turns: 1 },
      { unique: 0, busy: false, turns: 2 },
    ];
    const wire = encodeSlots(slots, 1500);
    assert.deepEqual(wire[0], [H('a'), 900, 600, 500, H('b'), 300, H('d'), 800, 4]);
    assert.deepEqual(wire[1], [H('c'), 400, 400, 500, '', 0, '', 0, 1]);
    assert.equal(wire[2].length, 4, 'an empty slot says no turns');
    const back = decodeSlots(JSON.parse(JSON.stringify(wire)), 2000)!;
    assert.deepEqual(
      back.map((s) => s.turns),
      [4, 1, undefined],
    );
    assert.equal(back[1].head, undefined, 'the padding is no head');
    assert.deepEqual(back[0].prev, { hash: H('d'), tokens: 800 });
    // Malformed turns are ignored, as a reader that knows none would.
    assert.equal(decodeSlots([[H('a'), 900, 600, 500, '', 0, '', 0, 'x']], 0)![0].turns, undefined);
    assert.equal(decodeSlots([[H('a'), 900, 600, 500, '', 0, '', 0, 0]], 0)![0].turns, undefined);
  });
});

describe("an entry prices a host's slots by the host's shares and its slots' turns (issue 42, items 2 and 4)", () => {
  it('names the slot the executor takes: the one-turn conversation\'s, though larger, over the six-turn one', () => {
    const gaps = new TurnGaps();
    const m = cacheModel({ kind: 'chosen', slots: 2, choose: (v, named) => chooseSlot(v, gaps.chance, named), onPlaced: (t) => gaps.placed(t) });
    let ms = 0;
    const run = (c: PrefixChain) => {
      const t = m.begin(c, ++ms, ms);
      m.finish(t, { processed: true, cachedTokens: t.predicted }, ++ms, ms);
    };
    const big = (name: string): PrefixChain => [
      { hash: hashOf([name, 's']), tokens: 5000 },
      { hash: hashOf([name, 'u']), tokens: 6000 },
    ];
    for (let i = 0; i < 30; i++) run(big(`shot ${i}`));
    const convo = ['s', 'u1', 'a1', 'u2', 'a2', 'u3', 'a3', 'u4', 'a4', 'u5', 'a5', 'u6'];
    for (let turn = 1; turn <= 6; turn++) run(convo.slice(0, 2 * turn).map((_, i, all) => ({ hash: hashOf(['convo', ...all.slice(0, i + 1)]), tokens: 3000 + 100 * i })));
    assert.deepEqual(m.slotStates!().map((s) => s.turns).sort(), [1, 6]);
    const curve = JSON.parse(JSON.stringify(gaps.curve())) as ReturnType<TurnGaps['curve']>;
    const slots = m.slotStates!();
    const digest: CacheDigest = { version: 1, held: new Map(m.held().map((l) => [l.hash, l.tokens])), slots: decodeSlots(JSON.parse(JSON.stringify(encodeSlots(slots, ms))), ms)! };
    const host: HostView = {
      name: 'a',
      local: false,
      rttMs: 1,
      fresh: true,
      polledAt: ms,
      returnChance: (idle, turns) => curveChance(idle, curve, turns),
      models: new Map([['m', { targets: [{ descriptor: { workloads: ['chat', 'completion'], audio: false }, slots: 2, busy: 0, digest }], slots: 2, busy: 0 }]]),
    };
    const cand: Candidate = { host: 'a', local: false, fresh: true, healthy: true, loading: false, free: 2, rttMs: 0, bestTarget: 'chat,completion', overheadMs: 100, ratePer1k: 100 };
    const next = big('the next shot');
    // An entry that has seen no gaps nor placements of its own: every conversation returns, by its own chance.
    const [c] = warmCandidates([cand], { hosts: [host], model: 'm', workload: 'chat', chain: next, memory: new RecentRoutes(() => ms), now: ms, chance: () => 1 });
    const t = m.begin(next, ++ms, ms, undefined, c.slot);
    assert.equal(c.slot, t.slot);
    assert.equal(slots[t.slot!].turns, 1, "the single shot's slot");
  });
});

/** 16 hex digits for a chain prefix (distinct prefixes, distinct hashes). */
function hashOf(prefix: string[]): string {
  let h = 0n;
  for (const ch of prefix.join('/')) h = (h * 131n + BigInt(ch.charCodeAt(0))) & 0xffffffffffffffffn;
  return h.toString(16).padStart(16, '0');
}
