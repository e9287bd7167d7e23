/**
 * Issue 25, item 6: an entry prices a free host whose digest tells its
 * slots by the slot the executor will take (the same rule, slots.ts), so
 * its predicted cached tokens are the engine's: a continuation reuses the
 * deepest link held (the prompt, and the reply after it), and a new
 * conversation that takes an empty slot reuses nothing, however many live
 * conversations hold its system prompt there.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { cacheModel } from '../../src/engines/cache-model.ts';
import { RecentRoutes } from '../../src/dispatch/entry/recent-routes.ts';
import { scanJsonObject } from '../../src/http/json-scan.ts';
import { walkPrompt } from '../../src/prompt/chain.ts';
import type { CacheDigest, PrefixChain } from '../../src/prompt/held.ts';
import { replyLink } from '../../src/prompt/reply.ts';
import { chooseSlot, curveChance, TurnGaps } from '../../src/route/slots.ts';
import type { Candidate, HostView } from '../../src/route/types.ts';
import { warmCandidates, type PlacedSlot } from '../../src/route/warmth.ts';

const SYSTEM = { role: 'system', content: 'You are the shared assistant. '.repeat(200) };
function chainOf(messages: unknown[]): PrefixChain {
  const body = Buffer.from(JSON.stringify({ model: 'm', messages }));
  const s = scanJsonObject(body);
  assert.ok(s.ok);
  return walkPrompt(body, s.object, 'chat').chain;
}
const cand = (over: Partial<Candidate> = {}): Candidate => ({ host: 'a', local: false, fresh: true, healthy: true, loading: false, free: 1, rttMs: 0, bestTarget: 'chat,completion', overheadMs: 100, ratePer1k: 100, ...over });
const hostWith = (digest: CacheDigest): HostView => ({
  name: 'a',
  local: false,
  rttMs: 1,
  fresh: true,
  polledAt: 1000,
  models: new Map([['m', { targets: [{ descriptor: { workloads: ['chat', 'completion'], audio: false }, slots: 2, busy: 0, digest }], slots: 2, busy: 0 }]]),
});

/** The executor's record of two slots after `turns` (each answered with `reply`), as its digest tells it. */
function executor(turns: PrefixChain[], replies: (PrefixChain[number] | undefined)[]) {
  const gaps = new TurnGaps();
  const m = cacheModel({ kind: 'chosen', slots: 2, choose: (v) => chooseSlot(v, gaps.chance) });
  let clock = 0;
  turns.forEach((c, i) => {
    // Every chain here has its head (the system message) first.
    const t = m.begin(c, ++clock, 100 * i, 0);
    m.finish(t, { processed: true, cachedTokens: t.predicted, ...(replies[i] ? { reply: replies[i] } : {}) }, ++clock, 100 * i + 50);
  });
  const held = new Map(m.held().map((l) => [l.hash, l.tokens]));
  return { m, digest: { version: 1, held, slots: m.slotStates!().map((s) => (s.idleSince !== undefined ? { ...s, idleSince: s.idleSince } : s)) } as CacheDigest, gaps };
}

/**
 * An executor of two slots whose gaps between turns are all 1 s, one slot holding another agent's live conversation
 * (ended at 50 ms), the other empty; it takes a slot its entry names when that costs no more (route/slots.ts).
 */
function hostWithLive() {
  const gaps = new TurnGaps();
  for (let i = 0; i < 10; i++) gaps.observe(1000);
  const m = cacheModel({ kind: 'chosen', slots: 2, choose: (v, named) => chooseSlot(v, gaps.chance, named) });
  const live = chainOf([{ role: 'system', content: 'Another agent altogether. '.repeat(300) }, { role: 'user', content: 'still going' }]);
  m.finish(m.begin(live, 1, 0, 0), { processed: true, cachedTokens: 0 }, 2, 50);
  return { gaps, m };
}

describe('an entry prices a free slot-state host by the slot the executor will take (issue 25, item 6)', () => {
  const first = chainOf([SYSTEM, { role: 'user', content: 'live conversation' }]);
  const reply = replyLink(first, { text: 'an answer', calls: [] }, 'chat')!;
  const memory = new RecentRoutes(() => 500);
  const inputs = (chain: PrefixChain, digest: CacheDigest, gaps: TurnGaps) => ({ hosts: [hostWith(digest)], model: 'm', workload: 'chat', chain, memory, now: 500, chance: gaps.chance });

  it("a new conversation sharing only the system prompt takes the empty slot: priced at what that slot holds, nothing, as the executor predicts", () => {
    const { m, digest, gaps } = executor([first], [reply]);
    const other = chainOf([SYSTEM, { role: 'user', content: 'a new conversation' }]);
    const [c] = warmCandidates([cand()], inputs(other, digest, gaps));
    const t = m.begin(other, 99, 500);
    assert.equal(t.predicted, 0);
    assert.equal(c.cached, t.predicted);
  });

  it("the live conversation's next turn, echoing the reply, is priced through the reply, as the executor predicts", () => {
    const { m, digest, gaps } = executor([first], [reply]);
    const next = chainOf([SYSTEM, { role: 'user', content: 'live conversation' }, { role: 'assistant', content: 'an answer' }, { role: 'user', content: 'more' }]);
    assert.equal(next[first.length].hash, reply.hash);
    const [c] = warmCandidates([cand()], inputs(next, digest, gaps));
    const t = m.begin(next, 99, 500);
    assert.ok(t.predicted > first.at(-1)!.tokens + 1, `through the reply: ${t.predicted}`);
    assert.equal(c.cached, t.predicted);
  });

  it('a new conversation that takes a dead conversation\'s slot sharing its system prompt is priced at the head, as the executor predicts', () => {
    const { m, digest, gaps } = executor([first], [reply]);
    assert.deepEqual(digest.slots!.find((x) => x.last)!.head, first[0], 'the slot publishes its head link');
    const other = chainOf([SYSTEM, { role: 'user', content: 'a new conversation' }]);
    // Ten minutes on, the first conversation is dead: its slot is worth nothing, and it shares the system prompt.
    const later = 600_000;
    const [c] = warmCandidates([cand()], { ...inputs(other, digest, gaps), now: later });
    const t = m.begin(other, 99, later, 0);
    assert.equal(t.predicted, first[0].tokens);
    assert.equal(c.cached, t.predicted);
  });

  it("a digest that shows every slot busy, when this node's forward there has ended since: priced by the same rule over them", () => {
    const gaps = new TurnGaps();
    const m = cacheModel({ kind: 'chosen', slots: 2, choose: (v) => chooseSlot(v, gaps.chance) });
    m.begin(first, 1, 0, 0);
    m.begin(chainOf([SYSTEM, { role: 'user', content: 'another one' }]), 2, 0, 0);
    const digest: CacheDigest = { version: 1, held: new Map(m.held().map((l) => [l.hash, l.tokens])), slots: m.slotStates!() };
    const next = chainOf([SYSTEM, { role: 'user', content: 'live conversation' }, { role: 'assistant', content: 'x' }, { role: 'user', content: 'more' }]);
    const [c] = warmCandidates([cand({ free: 1 })], inputs(next, digest, gaps));
    assert.equal(c.cached, first.at(-1)!.tokens, 'its own slot is the one that freed');
    const [d] = warmCandidates([cand({ free: 1 })], inputs(chainOf([SYSTEM, { role: 'user', content: 'a third' }]), digest, gaps));
    assert.equal(d.cached, first[0].tokens, 'a new conversation, at the head the freed slot shares');
    assert.equal(d.slot, undefined, 'no slot is named: which one freed is unknown');
  });

  it("a conversation's next turn whose slot was busy with its previous turn at the poll is priced warm there", () => {
    const gaps = new TurnGaps();
    const m = cacheModel({ kind: 'chosen', slots: 2, choose: (v) => chooseSlot(v, gaps.chance) });
    m.begin(first, 1, 0, 0);
    const digest: CacheDigest = { version: 1, held: new Map(m.held().map((l) => [l.hash, l.tokens])), slots: m.slotStates!() };
    const next = chainOf([SYSTEM, { role: 'user', content: 'live conversation' }, { role: 'assistant', content: 'x' }, { role: 'user', content: 'more' }]);
    const [c] = warmCandidates([cand({ free: 1 })], inputs(next, digest, gaps));
    assert.equal(c.cached, first.at(-1)!.tokens);
    assert.equal(c.evicted, undefined);
  });

  it("this node's own digest is of now: its record of a route here does not bring back a conversation evicted since", () => {
    const { digest, gaps } = executor([chainOf([SYSTEM, { role: 'user', content: 'the one that took it' }])], [undefined]);
    const routes = new RecentRoutes(() => 500);
    routes.record('a', 'm', first);
    const next = chainOf([SYSTEM, { role: 'user', content: 'live conversation' }, { role: 'assistant', content: 'x' }, { role: 'user', content: 'more' }]);
    const local = { ...hostWith(digest), local: true };
    const [c] = warmCandidates([cand({ local: true })], { ...inputs(next, digest, gaps), hosts: [local], memory: routes });
    assert.ok(c.cached! < first.at(-1)!.tokens, `the record of its route does not count: ${c.cached}`);
  });

  it('a full host still counts what its slots hold (the request waits for one of them)', () => {
    const { digest, gaps } = executor([first], [reply]);
    const other = chainOf([SYSTEM, { role: 'user', content: 'a new conversation' }]);
    const [c] = warmCandidates([cand({ free: 0 })], inputs(other, digest, gaps));
    assert.equal(c.cached, first[0].tokens);
  });

  it("an entry that runs no engine prices a host's slots by the host's own gaps between turns, so it predicts the slot the host takes (issue 42, item 4)", () => {
    const gaps = new TurnGaps();
    const m = cacheModel({ kind: 'chosen', slots: 2, choose: (v) => chooseSlot(v, gaps.chance) });
    const old = chainOf([{ role: 'system', content: 'Another agent altogether. '.repeat(300) }, { role: 'user', content: 'long ago' }]);
    let t = m.begin(old, 1, 0, 0);
    m.finish(t, { processed: true, cachedTokens: 0 }, 2, 50);
    t = m.begin(first, 3, 1000, 0);
    m.finish(t, { processed: true, cachedTokens: 0 }, 4, 1050);
    // Since then the executor has seen turns come back within 100 ms: a conversation idle past 200 ms is dead to it.
    for (let i = 0; i < 10; i++) gaps.observe(100);
    const digest: CacheDigest = { version: 1, held: new Map(m.held().map((l) => [l.hash, l.tokens])), slots: m.slotStates!() };
    const other = chainOf([SYSTEM, { role: 'user', content: 'a new conversation' }]);
    // The entry has seen no gaps at all (no engine of its own): to it every conversation idle under a minute is live.
    const entryGaps = new TurnGaps();
    const curve = gaps.curve();
    const host: HostView = { ...hostWith(digest), returnChance: (idle) => curveChance(idle, curve) };
    const [c] = warmCandidates([cand()], { hosts: [host], model: 'm', workload: 'chat', chain: other, memory, now: 1100, chance: entryGaps.chance });
    const [own] = warmCandidates([cand()], { hosts: [hostWith(digest)], model: 'm', workload: 'chat', chain: other, memory, now: 1100, chance: entryGaps.chance });
    const ran = m.begin(other, 5, 1100, 0);
    // The host takes the dead conversation's slot and keeps the live one's, which holds the shared system prompt.
    assert.equal(ran.predicted, 0);
    assert.equal(c.cached, ran.predicted);
    assert.notEqual(own.cached, ran.predicted, "by the entry's own (empty) gaps it would price the live conversation's slot");
  });

  it("a slot the digest shows busy with this node's forward, ended since the poll, is priced as just freed: the executor may take it", () => {
    const { gaps, m } = hostWithLive();
    // The poll saw the first conversation running in the other slot; this node's forward of it has ended since.
    const t = m.begin(first, 3, 100, 0);
    const digest: CacheDigest = { version: 1, held: new Map(m.held().map((l) => [l.hash, l.tokens])), slots: m.slotStates!() };
    m.finish(t, { processed: true, cachedTokens: 0 }, 4, 150);
    const other = chainOf([SYSTEM, { role: 'user', content: 'a new conversation' }]);
    const [c] = warmCandidates([cand({ free: 2 })], { hosts: [hostWith(digest)], model: 'm', workload: 'chat', chain: other, memory, now: 200, chance: gaps.chance });
    const ran = m.begin(other, 5, 200, 0);
    assert.equal(ran.predicted, first[0].tokens, 'the executor takes the just-ended conversation\'s slot, sharing the system prompt');
    assert.equal(c.cached, ran.predicted);
    assert.equal(c.slot, undefined, 'no slot named: which busy one freed is unknown');
  });
  it("a slot the digest shows busy with this node's forward, sent before the poll and ended since, is that forward's, idle: the price names it and the executor takes it (issue 42, item 4)", () => {
    const { gaps, m } = hostWithLive();
    // This node sent the first conversation before the poll; the poll saw it running; it has ended since.
    const t = m.begin(first, 3, 100, 0);
    const digest: CacheDigest = { version: 1, held: new Map(m.held().map((l) => [l.hash, l.tokens])), slots: m.slotStates!() };
    m.finish(t, { processed: true, cachedTokens: 0 }, 4, 1090);
    // The record names the slot this node priced; the executor may have taken another: the digest says which.
    const placed: PlacedSlot[] = [{ slot: 1 - t.slot!, last: first.at(-1)!, head: first[0], endedAt: 1090, polled: true }];
    const other = chainOf([SYSTEM, { role: 'user', content: 'a new conversation' }]);
    const price = (p: PlacedSlot[]) => warmCandidates([cand({ free: 2 })], { hosts: [hostWith(digest)], model: 'm', workload: 'chat', chain: other, memory, now: 1100, chance: gaps.chance, placed: () => p })[0];
    const c = price(placed);
    assert.equal(price([]).slot, undefined, 'without the record: one busy slot freed, which unknown, none named');
    assert.equal(c.slot, t.slot, 'the slot found by its prompt, not the one the record named');
    assert.equal(c.cached, first[0].tokens, 'priced at the shared system prompt');
    const ran = m.begin(other, 5, 1100, 0, c.slot);
    assert.equal(ran.slot, c.slot);
    assert.equal(ran.predicted, c.cached);
  });
  it("the slot this node's own forward took since the poll holds that forward's prompt: a second conversation sharing its system prompt is priced where the executor takes it (issue 42, item 4)", () => {
    const { gaps, m } = hostWithLive();
    // The report this node prices on was polled here: one live conversation, one empty slot.
    const digest: CacheDigest = { version: 1, held: new Map(m.held().map((l) => [l.hash, l.tokens])), slots: m.slotStates!() };
    const at = (now: number, chain: PrefixChain, placed: PlacedSlot[] = []) =>
      warmCandidates([cand({ free: 2 })], { hosts: [hostWith(digest)], model: 'm', workload: 'chat', chain, memory, now, chance: gaps.chance, placed: () => placed });
    // This node sends the first conversation; its price names the slot, and the executor takes that one.
    const [sent] = at(100, first);
    const t = m.begin(first, 3, 100, 0);
    assert.equal(t.slot, sent.slot);
    m.finish(t, { processed: true, cachedTokens: 0 }, 4, 150);
    const placed: PlacedSlot[] = [{ slot: sent.slot!, last: first.at(-1)!, head: first[0], endedAt: 150 }];
    // Before the next poll, a second conversation sharing the system prompt.
    const other = chainOf([SYSTEM, { role: 'user', content: 'a new conversation' }]);
    const [c] = at(200, other, placed);
    const [blind] = at(200, other);
    const ran = m.begin(other, 5, 200, 0);
    assert.equal(ran.predicted, first[0].tokens, "the executor keeps the live conversation's slot and takes the first one's, holding the system prompt");
    assert.equal(c.cached, ran.predicted);
    assert.equal(c.slot, ran.slot);
    assert.notEqual(blind.cached, ran.predicted, 'on the digest alone it priced the slot as it was at the poll');
  });
});
