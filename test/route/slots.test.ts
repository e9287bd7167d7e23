/**
 * Issue 25: a free slot is not empty (SPEC section 9, step 6, "Eviction",
 * "Slot choice", "Session home"). Tables over the pure slot choice, the
 * chance an idle conversation returns, the eviction price through the
 * whole decision (digest slot states in, a host out), and session homes
 * seen from every entry node.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { CacheDigest, PrefixChain, SlotHold } from '../../src/prompt/held.ts';
import { decide } from '../../src/route/decide.ts';
import { holdStep, NO_HOLD } from '../../src/route/hold.ts';
import { homeRanking } from '../../src/route/session-home.ts';
import { cascadeOf, chooseSlot, curveChance, evictsUnpriced, expectedLoss, GAP_CURVE_POINTS, gapCurve, MAX_CASCADE, MIN_GAPS, PRIOR_LIVE_MS, readGapCurve, returnChance, TurnGaps, type SlotView } from '../../src/route/slots.ts';
import type { Candidate, Decision, HostView, RouteRequest } from '../../src/route/types.ts';
import { warmCandidates } from '../../src/route/warmth.ts';
import { seeded } from '../helpers/random.ts';

const LIVE = 1; // a conversation sure to return
const live = () => LIVE;
const slot = (over: Partial<SlotView>): SlotView => ({ busy: false, tokens: 0, shared: 0, unique: 0, idleMs: 0, ...over });
// Gaps of 0.5–3 s between turns: a conversation idle 1 s is live, one idle a minute is dead.
const gaps = new TurnGaps();
for (let i = 0; i < 32; i++) gaps.observe(500 + (i % 6) * 500);

describe('the slot a request takes (executor and entry alike)', () => {
  const table: { name: string; slots: SlotView[]; want: number | undefined; evicted?: number }[] = [
    {
      name: 'the slot its conversation is in, even over an empty one',
      slots: [slot({}), slot({ tokens: 9000, shared: 9000, unique: 1000, idleMs: 800 })],
      want: 1,
    },
    {
      name: 'of two it continues, the longer',
      slots: [slot({ tokens: 3000, shared: 3000, unique: 3000 }), slot({ tokens: 9000, shared: 9000, unique: 6000 })],
      want: 1,
    },
    {
      name: 'a live conversation’s slot is not taken while an empty one exists',
      slots: [slot({ tokens: 20000, unique: 12000, idleMs: 900 }), slot({}), slot({ tokens: 15000, unique: 7000, idleMs: 1500 })],
      want: 1,
    },
    {
      name: 'a live conversation’s slot is not taken while a dead one exists (idle far past every gap)',
      slots: [slot({ tokens: 20000, unique: 12000, idleMs: 900 }), slot({ tokens: 25000, unique: 17000, idleMs: 120_000 })],
      want: 1,
    },
    {
      name: 'of empty and dead slots, the one holding more of this prompt (a shared system prompt)',
      slots: [slot({}), slot({ tokens: 25000, shared: 8000, unique: 17000, idleMs: 120_000 })],
      want: 1,
    },
    {
      name: 'a slot whose prompt other slots hold too is worth nothing',
      slots: [slot({ tokens: 20000, unique: 12000, idleMs: 900 }), slot({ tokens: 8000, unique: 0, idleMs: 100 })],
      want: 1,
    },
    {
      name: 'all live: the one worth least, its conversation longest idle',
      slots: [slot({ tokens: 20000, unique: 12000, idleMs: 600 }), slot({ tokens: 20000, unique: 12000, idleMs: 2900 })],
      want: 1,
      evicted: 12000,
    },
    {
      name: 'all live: the one worth least, the fewest tokens lost',
      slots: [slot({ tokens: 20000, unique: 12000, idleMs: 600 }), slot({ tokens: 9000, unique: 1000, idleMs: 600 })],
      want: 1,
      evicted: 1000,
    },
    {
      name: 'a busy slot is never taken, however cheap',
      slots: [slot({ busy: true, idleMs: undefined }), slot({ tokens: 20000, unique: 12000, idleMs: 600 })],
      want: 1,
      evicted: 12000,
    },
    {
      name: 'the slot of its own conversation grown inside its last message (shares past the head, over half of it), over an empty one',
      slots: [slot({}), slot({ tokens: 9000, shared: 8600, head: 500, unique: 9000, idleMs: 800 })],
      want: 1,
    },
    {
      name: 'not a slot that shares only the head with it, however long the head',
      slots: [slot({}), slot({ tokens: 3000, shared: 2000, head: 2000, unique: 1000, idleMs: 800 })],
      want: 0,
    },
    {
      name: 'not a slot that shares past the head but under half of it (a branch of a longer conversation)',
      slots: [slot({}), slot({ tokens: 20000, shared: 6000, head: 500, unique: 14000, idleMs: 800 })],
      want: 0,
    },
    {
      name: 'nor, with its head unknown, one it does not continue whole',
      slots: [slot({}), slot({ tokens: 9000, shared: 8600, unique: 9000, idleMs: 800 })],
      want: 0,
    },
    { name: 'every slot busy: none', slots: [slot({ busy: true }), slot({ busy: true })], want: undefined },
  ];
  for (const row of table) {
    it(row.name, () => {
      const pick = chooseSlot(row.slots, gaps.chance);
      assert.equal(pick?.index, row.want);
      assert.equal(pick?.evicted?.tokens, row.evicted);
    });
  }

  it('takes the slot the entry named when it costs no more here, and not otherwise', () => {
    // A conversation just ended in slot 0, sharing a 4,000-token system prompt with this one; slot 1 holds one long dead.
    const host = [slot({ tokens: 4017, shared: 4009, unique: 4017, idleMs: 50 }), slot({ tokens: 2000, shared: 3, unique: 2000, idleMs: 120_000 })];
    assert.equal(chooseSlot(host, gaps.chance)?.index, 1, 'alone, the executor keeps the live conversation’s slot');
    // Its entry priced slot 0 (4,009 reused, 8 tokens of a live tail lost): no worse here, so the prediction holds.
    const named = chooseSlot(host, gaps.chance, 0);
    assert.equal(named?.index, 0);
    assert.equal(named?.reused, 4009);
    // A slot whose live conversation shares nothing would cost thousands of tokens here: the executor's own choice.
    const live = [slot({ tokens: 6000, shared: 0, unique: 6000, idleMs: 50 }), slot({})];
    assert.equal(chooseSlot(live, gaps.chance, 0)?.index, 1);
    // A busy slot, or no such slot, is not taken.
    assert.equal(chooseSlot([slot({ busy: true, tokens: 4000, shared: 4000 }), slot({})], gaps.chance, 0)?.index, 1);
    const two = [slot({}), slot({ tokens: 100, unique: 100, idleMs: 120_000 })];
    assert.equal(chooseSlot(two, gaps.chance, 7)?.index, chooseSlot(two, gaps.chance)?.index);
  });

  it('an eviction sets off more re-prefills the more of the host’s other slots hold live conversations', () => {
    // The evicted conversation returns and needs a slot: on a host of live conversations it takes one of theirs.
    const table: [number, number][] = [
      [0, 1],
      [0.5, 2],
      [0.75, 4],
      [1, MAX_CASCADE],
      [2, MAX_CASCADE],
    ];
    for (const [live, want] of table) assert.equal(cascadeOf(live), Math.min(want, MAX_CASCADE), `live share ${live}`);
    // Every other slot busy: the most there is.
    const crowded = chooseSlot([slot({ busy: true }), slot({ busy: true }), slot({ tokens: 20000, unique: 12000, idleMs: 600 })], gaps.chance);
    assert.equal(crowded?.evicted?.cascade, MAX_CASCADE);
    // The other idle slot's conversation is less likely to return (idle 2.2 s of gaps of 0.5–3 s): fewer.
    const roomy = chooseSlot([slot({ tokens: 9000, unique: 4000, idleMs: 600 }), slot({ tokens: 30000, unique: 30000, idleMs: 2200 })], gaps.chance);
    assert.equal(roomy?.index, 0, 'the other holds more tokens at stake: the live, smaller one is taken');
    assert.ok(roomy!.evicted!.cascade > 1 && roomy!.evicted!.cascade < crowded!.evicted!.cascade, `cascade ${roomy!.evicted!.cascade}`);
  });

  it('a first turn’s eviction costs one re-prefill times its chance; one whose conversation has returned keeps the cascade', () => {
    // Every other slot busy: a conversation that has returned before is priced at the whole cascade, as above.
    const others = [slot({ busy: true }), slot({ busy: true })];
    const returned = chooseSlot([...others, slot({ tokens: 64000, unique: 64000, idleMs: 600, turns: 3 })], gaps.chance);
    assert.equal(returned?.evicted?.cascade, MAX_CASCADE);
    // The same slot holding a prompt seen once there (a single shot, or a conversation's first turn): no cascade.
    const single = chooseSlot([...others, slot({ tokens: 64000, unique: 64000, idleMs: 600, turns: 1 })], gaps.chance);
    assert.equal(single?.evicted?.cascade, 1);
    assert.equal(single?.evicted?.tokens, 64000);
    assert.equal(expectedLoss(single?.evicted), 64000 * single!.evicted!.chance);
    // An executor that does not say how many turns: the cascade, as before turns were counted.
    const unsaid = chooseSlot([...others, slot({ tokens: 64000, unique: 64000, idleMs: 600 })], gaps.chance);
    assert.equal(unsaid?.evicted?.cascade, MAX_CASCADE);
  });

  it('the chance a conversation returns follows the gaps observed', () => {
    // Too few gaps: the prior (live for a minute, dead after two).
    assert.equal(returnChance(PRIOR_LIVE_MS, []), 1);
    assert.equal(returnChance(2 * PRIOR_LIVE_MS, []), 0);
    const sorted = Array.from({ length: MIN_GAPS * 4 }, (_, i) => 100 * (i + 1)); // 100 … 3200 ms
    assert.equal(returnChance(0, sorted), 1);
    const mid = returnChance(1600, sorted);
    assert.ok(mid > 0.45 && mid < 0.55, `half the gaps are longer than 1.6 s: ${mid}`);
    assert.ok(returnChance(3300, sorted) < 0.05);
    assert.equal(returnChance(6500, sorted), 0);
    assert.ok(gaps.chance(900) > 0.7 && gaps.chance(60_000) === 0);
  });
});

// A digest's slot states, the way an entry node reads them (idleSince on its own clock).
const NOW = 1_000_000;
const conv = (name: string, tokens: number): PrefixChain => [
  { hash: 'a'.repeat(16), tokens: 8000 },
  { hash: name.padEnd(16, '0').slice(0, 16), tokens },
];
const hold = (chain: PrefixChain | undefined, idleMs: number, unique?: number): SlotHold =>
  chain ? { last: chain.at(-1)!, unique: unique ?? chain.at(-1)!.tokens - 8000, busy: false, idleSince: NOW - idleMs } : { unique: 0, busy: false, idleSince: NOW - idleMs };
function hostWith(name: string, slots: SlotHold[], busy = 0): HostView {
  const held = new Map<string, number>();
  for (const s of slots) if (s.last) held.set(s.last.hash, s.last.tokens);
  const digest: CacheDigest = { version: 1, held, slots };
  return {
    name,
    local: false,
    rttMs: 0,
    fresh: true,
    polledAt: NOW - 100,
    models: new Map([['m', { slots: slots.length, busy, targets: [{ descriptor: { workloads: ['chat', 'completion'], audio: false }, slots: slots.length, busy, digest }] }]]),
  };
}
const cand = (host: string, over: Partial<Candidate>): Candidate => ({ host, local: false, fresh: true, healthy: true, loading: false, free: 1, rttMs: 0, bestTarget: 'chat,completion', overheadMs: 100, ...over });
const req = (over: Partial<RouteRequest> = {}): RouteRequest => ({ model: 'm', workload: 'chat', promptTokens: 9000, prefer: [], ...over });
const where = (d: Decision) => (d.kind === 'run' ? `${d.host}/${d.reason}` : d.host ? `wait:${d.host}` : 'wait');
const none = { held: () => 0 };

describe('eviction in the price: new conversations go where they evict least', () => {
  // A new conversation (the shared system prompt, then its own first turn): 9,000 tokens, 8,000 of them the system prompt.
  const fresh: PrefixChain = conv('new', 9000);
  function place(fastSlots: SlotHold[], slowSlots: SlotHold[], rates = { fast: 80, slow: 250 }) {
    const hosts = [hostWith('fast', fastSlots), hostWith('slow', slowSlots)];
    const cands = [cand('fast', { ratePer1k: rates.fast, free: fastSlots.length, slots: fastSlots.length }), cand('slow', { ratePer1k: rates.slow, free: slowSlots.length, slots: slowSlots.length })];
    const warm = warmCandidates(cands, { hosts, model: 'm', workload: 'chat', chain: fresh, memory: none, now: NOW, chance: gaps.chance });
    return { d: decide(warm, req({ pricedTokens: 9000 }), { performance: true, random: seeded(5), roundRobin: 0 }), warm };
  }

  it('a slower host’s empty slot beats a fast host whose free slots all hold live conversations worth more than the difference', () => {
    // fast: 100 + 80 × 9 = 820 ms, plus evicting 12,000 live tokens at 80/1k ≈ 960 → ~1,780; slow: 100 + 250 × 9 = 2,350 cold.
    // The difference (1,530 ms) is less than what fast would destroy.
    const { d, warm } = place([hold(conv('c1', 20000), 900), hold(conv('c2', 20000), 1200)], [hold(undefined, 0), hold(conv('c3', 18000), 700)], { fast: 80, slow: 150 });
    assert.equal(where(d), 'slow/scored');
    assert.equal(d.kind === 'run' && d.slot, 0, 'the empty slot');
    assert.equal(warm[0].evicted?.tokens, 12000);
    assert.equal(warm[1].evicted, undefined);
  });

  it('but the fast host when the difference is larger than what it would destroy', () => {
    // fast: 820 + 0.9 × 2,000 × 80/1k ≈ 970; slow: 100 + 250 × 9 = 2,350.
    const { d } = place([hold(conv('c1', 10000), 900), hold(conv('c2', 10000), 1200)], [hold(undefined, 0)]);
    assert.equal(where(d), 'fast/scored');
  });

  it('and the fast host when the conversations in its slots are dead', () => {
    const { d, warm } = place([hold(conv('c1', 20000), 90_000), hold(conv('c2', 20000), 120_000)], [hold(undefined, 0)], { fast: 80, slow: 150 });
    assert.equal(where(d), 'fast/scored');
    assert.equal(warm[0].evicted, undefined);
  });

  // A slot running another conversation's turn.
  const busy = (c: string): SlotHold => ({ ...hold(conv(c, 13000), 0), busy: true, idleSince: undefined });

  it('a slower host’s empty slot beats a fast host full of live conversations even when one re-prefill of the evicted prompt is less than the difference', () => {
    // fast: 100 + 80 × 9 = 820 ms, evicting 5,000 live tokens: one re-prefill ≈ 360 ms (1,180 in all, under slow's
    // 100 + 150 × 9 = 1,450). But its other three slots are busy: the evicted conversation's return evicts another.
    const { d, warm } = place([busy('b1'), busy('b2'), busy('b3'), hold(conv('c1', 13000), 900)], [hold(undefined, 0), hold(undefined, 0)], { fast: 80, slow: 150 });
    assert.equal(warm[0].evicted?.tokens, 5000);
    // The fleet has room (slow's two empty slots): the evicted conversation's return sets off at most what the fleet's
    // live share does (4 of 6 slots live after this placement: 3 re-prefills), not the host's (every slot: 4).
    assert.equal(warm[0].evicted?.cascade, cascadeOf(4 / 6));
    assert.ok(warm[0].evicted!.cascade < MAX_CASCADE);
    assert.equal(where(d), 'slow/scored');
  });

  it('an eviction’s cascade is the host’s when the rest of the fleet is as full of live conversations', () => {
    const { warm } = place([busy('b1'), busy('b2'), busy('b3'), hold(conv('c1', 13000), 900)], [busy('b4'), busy('b5')], { fast: 80, slow: 150 });
    assert.equal(warm[0].evicted?.cascade, MAX_CASCADE);
  });

  it('a host that sent back a forward for its eviction has its idle slots priced as live until its next report', () => {
    // The digest says fast's conversations are dead (idle 90 and 120 s): fast wins, as above. The executor found them
    // otherwise (another entry had just placed new conversations there): until fast reports again, they are live.
    const slots = () => [hold(conv('c1', 20000), 90_000), hold(conv('c2', 20000), 120_000)];
    const hosts = [hostWith('fast', slots()), hostWith('slow', [hold(undefined, 0)])];
    const cands = [cand('fast', { ratePer1k: 80, free: 2, slots: 2 }), cand('slow', { ratePer1k: 150, free: 1, slots: 1 })];
    const marks: string[] = [];
    const crowded = (host: string, polledAt: number) => (marks.push(`${host}@${polledAt}`), host === 'fast');
    const warm = warmCandidates(cands, { hosts, model: 'm', workload: 'chat', chain: conv('new', 9000), memory: none, now: NOW, chance: gaps.chance, crowded });
    const d = decide(warm, req({ pricedTokens: 9000 }), { performance: true, random: seeded(5), roundRobin: 0 });
    assert.equal(where(d), 'slow/scored');
    assert.equal(warm[0].evicted?.chance, 1);
    // Live because the digest is stale, not because its conversations crowd each other: one re-prefill, as the
    // executor that sent the forward back weighs it (both slots live would otherwise set off MAX_CASCADE).
    assert.equal(warm[0].evicted?.cascade, 1);
    assert.deepEqual(marks, [`fast@${NOW - 100}`, `slow@${NOW - 100}`], 'asked with the poll time of each host’s report');
  });

  it('a conversation’s next turn finds its own slot and evicts nothing', () => {
    const next: PrefixChain = [...conv('c1', 20000), { hash: 'c1next'.padEnd(16, '0'), tokens: 21000 }];
    const hosts = [hostWith('fast', [hold(conv('c2', 20000), 900), hold(conv('c1', 20000), 1200)])];
    const [w] = warmCandidates([cand('fast', { ratePer1k: 80, free: 2 })], { hosts, model: 'm', workload: 'chat', chain: next, memory: none, now: NOW, chance: gaps.chance });
    assert.equal(w.slot, 1);
    assert.equal(w.evicted, undefined);
    assert.equal(w.cached, 20000);
  });
});

describe('session home: one host from every entry node', () => {
  const names = ['ra', 'rb', 'rc'];
  const slotsOf: Record<string, number> = { ra: 4, rb: 6, rc: 8 };
  const cands = (entry: string, over: (h: string) => Partial<Candidate> = () => ({})) =>
    names.map((h) => cand(h, { local: h === entry, slots: slotsOf[h], free: 2, ratePer1k: 100, ...over(h) }));
  const decideFrom = (entry: string, key: string, over?: (h: string) => Partial<Candidate>) =>
    decide(cands(entry, over), req({ sessionKey: key, pricedTokens: 4000 }), { performance: true, random: seeded(9), roundRobin: 0 });

  it('is the same on every entry node, though each entry’s own host is a little cheaper from there', () => {
    for (let k = 0; k < 60; k++) {
      const key = `s-${k}`;
      // From each entry its own host has no RTT and the others 5–30 ms: the seed's band keeps the home.
      const chosen = names.map((entry) => where(decideFrom(entry, key, (h) => ({ rttMs: h === entry ? 0 : 5 + 5 * k % 25 }))));
      assert.equal(new Set(chosen).size, 1, `${key}: ${chosen}`);
      assert.equal(chosen[0], `${homeRanking(key, cands('ra'))[0]}/session`);
    }
  });

  it('homes spread in proportion to each host’s slots', () => {
    const count: Record<string, number> = {};
    const n = 6000;
    for (let k = 0; k < n; k++) {
      const home = homeRanking(`key-${k}`, cands('ra'))[0];
      count[home] = (count[home] ?? 0) + 1;
    }
    for (const h of names) assert.ok(Math.abs(count[h] / n - slotsOf[h] / 18) < 0.03, `${h}: ${count[h] / n}`);
  });

  it('moves the same way from every entry node when its home is full and cold, and comes back', () => {
    for (let k = 0; k < 30; k++) {
      const key = `m-${k}`;
      const [home, second] = homeRanking(key, cands('ra'));
      const moved = names.map((entry) => where(decideFrom(entry, key, (h) => (h === home ? { free: 0 } : {}))));
      assert.deepEqual(moved, names.map(() => `${second}/session`), key);
      assert.equal(where(decideFrom('rb', key)), `${home}/session`);
    }
  });

  it('moves when its home is priced beyond 1.25× the best free host, to the next host of its ranking in the band', () => {
    const key = 'priced';
    const [home, second] = homeRanking(key, cands('ra'));
    // The home holds nothing of a long prompt that another host holds almost all of.
    const over = (h: string): Partial<Candidate> => (h === home ? { cached: 0 } : { cached: 3500 });
    for (const entry of names) assert.equal(where(decideFrom(entry, key, over)), `${second}/session`);
  });

  it('waits for a full warm home while that pays, then moves where every entry node moves it', () => {
    const key = 'warm';
    const [home, second] = homeRanking(key, cands('ra'));
    const over = (h: string): Partial<Candidate> => (h === home ? { free: 0, cached: 3900, releaseMs: 20 } : {});
    const r = req({ sessionKey: key, pricedTokens: 4000 });
    const o = { performance: true, random: seeded(9), roundRobin: 0 };
    for (const entry of names) {
      const c = cands(entry, over);
      const first = holdStep(NO_HOLD, (x) => decide(c, { ...r, ...x }, o), 0);
      assert.equal(where(first.decision), `wait:${home}`);
      // The hold runs out with the home still full: the turn moves, to its ranking's next host.
      const later = holdStep(first.state, (x) => decide(c, { ...r, ...x }, o), first.wakeAt! + 1);
      assert.equal(where(later.decision), `${second}/session`);
    }
  });
});

describe('an executor sends back a forward whose eviction its entry did not price', () => {
  const table: [loss: number, priced: number, sentBack: boolean, why: string][] = [
    [0, 0, false, 'nothing destroyed'],
    [12000, 0, true, 'the entry saw an empty slot, the executor a live conversation'],
    [200, 0, false, 'a small loss is not worth a round trip'],
    [1200, 1000, false, 'about what was priced'],
    [6000, 1000, true, 'far more than priced: the entry read a stale digest'],
    [6000, 6000, false, 'priced in full (a retry after being sent back prices idle slots as live)'],
  ];
  for (const [loss, priced, sentBack, why] of table) {
    it(`${loss} tokens lost against ${priced} priced: ${sentBack ? 'sent back' : 'runs'} (${why})`, () => {
      assert.equal(evictsUnpriced(loss, priced), sentBack);
    });
  }
});

describe('the gaps between turns a node publishes (turn_gaps) read as its slot choice reads them (issue 42, item 4)', () => {
  it('while every gap is a point of the curve, the chance is the one the gaps themselves give', () => {
    const gaps = [120, 80, 3000, 450, 450, 900, 60, 2500, 1800, 700];
    const sorted = [...gaps].sort((a, b) => a - b);
    const curve = gapCurve(sorted);
    assert.deepEqual(curve, { n: gaps.length, q: sorted });
    for (const idle of [0, 60, 100, 450, 451, 2999, 3000, 5999, 6001]) assert.equal(curveChance(idle, curve), returnChance(idle, sorted), `idle ${idle}`);
  });

  it('past GAP_CURVE_POINTS gaps, within one point of the chance the gaps give, and dead past twice the longest, as they say', () => {
    const r = seeded(7);
    const sorted = Array.from({ length: 200 }, () => Math.round(r() * 10_000)).sort((a, b) => a - b);
    const curve = gapCurve(sorted);
    assert.equal(curve.q.length, GAP_CURVE_POINTS);
    assert.equal(curve.q.at(-1), sorted.at(-1));
    for (let idle = 0; idle <= 21_000; idle += 250) assert.ok(Math.abs(curveChance(idle, curve) - returnChance(idle, sorted)) <= 1 / GAP_CURVE_POINTS + 1e-9, `idle ${idle}`);
    assert.equal(curveChance(2 * sorted.at(-1)! + 1, curve), 0);
  });

  it("a node's own chance is its published curve's, and under MIN_GAPS gaps the prior", () => {
    const g = new TurnGaps();
    for (let i = 0; i < MIN_GAPS - 1; i++) g.observe(100);
    assert.equal(g.chance(PRIOR_LIVE_MS), 1, 'the prior');
    for (let i = 0; i < 100; i++) g.observe(100 + i * 37.3);
    const c = readGapCurve(JSON.parse(JSON.stringify(g.curve())))!;
    for (const idle of [0, 500, 2000, 4000, 8000]) assert.equal(curveChance(idle, c), g.chance(idle));
  });

  it('a malformed curve is not read', () => {
    for (const bad of [null, 5, {}, { n: -1, q: [] }, { n: 2, q: [3, 1] }, { n: 1, q: [1, 2] }, { n: 3, q: [1, 'x'] }, { n: 99, q: Array(GAP_CURVE_POINTS + 1).fill(1) }]) {
      assert.equal(readGapCurve(bad), undefined, JSON.stringify(bad));
    }
    assert.deepEqual(readGapCurve({ n: 0, q: [] }), { n: 0, q: [] });
  });
});
