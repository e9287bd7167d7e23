/**
 * Issue 41, item 2: today's llama-server keeps a host-RAM prompt cache. The
 * pure pool (src/prompt/ram-pool.ts), the executor's slot model with it
 * (src/engines/cache-model.ts) and the slot choice (src/route/slots.ts):
 * tables of requests in, predicted reuse and choices out.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { cacheModel, type CacheModel, type PoolSettings } from '../../src/engines/cache-model.ts';
import type { PrefixChain } from '../../src/prompt/held.ts';
import { RamPool, savesSlot } from '../../src/prompt/ram-pool.ts';
import { chooseSlot, expectedLoss, RESTORE_SHARE, type SlotView } from '../../src/route/slots.ts';
import { withPool } from '../../src/route/warmth.ts';

/** Prompts as strings, one token a character: the pool over a plain measure. */
const TEXT = { tokens: (s: string) => s.length, common: (a: string, b: string) => { let i = 0; while (i < a.length && i < b.length && a[i] === b[i]) i++; return i; } };

describe('the RAM pool (llama-server’s server_prompt_cache)', () => {
  it('evicts the oldest insertion first, by size, and keeps an entry larger than the whole pool out', () => {
    const pool = new RamPool(TEXT, 10);
    assert.deepEqual(pool.save('aaaa'), []);
    assert.deepEqual(pool.save('bbbb'), []);
    // 4 + 4 + 4 > 10: the oldest (aaaa) goes, though it was the one saved first, not the one used least.
    assert.deepEqual(pool.save('cccc')?.map((e) => e.prompt), ['aaaa']);
    assert.deepEqual(pool.entries.map((e) => e.prompt), ['bbbb', 'cccc']);
    assert.equal(pool.save('x'.repeat(11)), undefined, 'larger than the pool: not stored');
    assert.deepEqual(pool.entries.map((e) => e.prompt), ['bbbb', 'cccc'], 'and nothing dropped for it');
  });

  it('a prompt already contained is not saved twice; one that extends an entry replaces it', () => {
    const pool = new RamPool(TEXT, 100);
    pool.save('abcdef');
    assert.deepEqual(pool.save('abc'), [], 'contained: in RAM already');
    assert.equal(pool.entries.length, 1);
    pool.save('abcdefgh');
    assert.deepEqual(pool.entries.map((e) => e.prompt), ['abcdefgh'], 'the shorter entry is replaced, not dropped as lost');
  });

  it('a slot keeping half or more of its prompt is overwritten in place; under half, saved; an empty one never', () => {
    assert.equal(savesSlot(100, 60, 120), false, 'keeps 60%: overwritten, its tail lost');
    assert.equal(savesSlot(100, 40, 120), true, 'keeps 40%: saved');
    assert.equal(savesSlot(100, 60, 1000), true, 'a share of the request at or under 0.1 counts as keeping nothing');
    assert.equal(savesSlot(0, 0, 100), false);
  });

  it('taking a slot restores the entry that beats it on both shares, and the entry leaves RAM', () => {
    const pool = new RamPool(TEXT, 100);
    pool.save('AAAAAAAAAA');
    const took = pool.take('BBBBBBBBBB', 'AAAAAAAAAAxx');
    assert.equal(took.restored, true);
    assert.equal(took.slot, 'AAAAAAAAAA');
    assert.deepEqual(pool.entries.map((e) => e.prompt), ['BBBBBBBBBB'], 'the slot’s own prompt went to RAM, the restored one left it');
    // An entry the request keeps under a quarter of is not restored ("don't trash large prompts").
    const big = new RamPool(TEXT, 100);
    big.save('CC' + 'c'.repeat(40));
    assert.equal(big.take('DDDD', 'CCxx').restored, false);
  });

  it('nothing is restored into an empty slot named by id_slot; the engine’s own least-recently-used pick restores', () => {
    const pool = new RamPool(TEXT, 100);
    pool.save('AAAAAAAAAA');
    assert.equal(pool.take(undefined, 'AAAAAAAAAAxx').restored, false);
    assert.equal(pool.take(undefined, 'AAAAAAAAAAxx', 0.1, true).restored, true);
  });
});

/** A chain whose links are named by the messages so far ("s", "s/u1", ...), each message `each` tokens. */
function chain(messages: string[], each = 100): PrefixChain {
  return messages.map((_, i) => ({ hash: messages.slice(0, i + 1).join('/'), tokens: (i + 1) * each }));
}

let clock = 0;
/** Requests one after another, the engine agreeing with the model; ms advances a second per request. */
function serial(m: CacheModel, chains: PrefixChain[]): { slot?: number; predicted: number; restored?: number }[] {
  return chains.map((c) => {
    const t = m.begin(c, ++clock, clock * 1000);
    m.finish(t, { processed: true, cachedTokens: t.predicted }, ++clock, clock * 1000);
    return { slot: t.slot, predicted: t.predicted, ...(t.restored ? { restored: t.restored } : {}) };
  });
}

const live = () => 1;
function model(slots: number, pool?: PoolSettings): CacheModel {
  return cacheModel({ kind: 'chosen', slots, choose: (v) => chooseSlot(v, live), pool: () => pool });
}

describe('the executor’s slot model with a RAM pool', () => {
  it('one slot: a conversation pushed out by another comes back from RAM (without a pool, cold)', () => {
    const seq = [chain(['a', 'a1']), chain(['b', 'b1']), chain(['a', 'a1', 'x', 'a2']), chain(['b', 'b1', 'y', 'b2'])];
    const pooled = serial(model(1, { tokens: 10_000 }), seq);
    assert.deepEqual(pooled.map((r) => r.predicted), [0, 0, 200, 200]);
    assert.deepEqual(pooled.map((r) => r.restored ?? 0), [0, 0, 200, 200], 'told restored from RAM, not a slot hit');
    const none = serial(model(1), seq);
    assert.deepEqual(none.map((r) => r.predicted), [0, 0, 0, 0]);
  });

  it('a conversation is lost only when the pool drops it: oldest saved first, by tokens', () => {
    // Three conversations of 200 tokens on one slot; the pool holds 300 tokens: one entry fits beside the slot.
    const m = model(1, { tokens: 300 });
    const r = serial(m, [chain(['a', 'a1']), chain(['b', 'b1']), chain(['c', 'c1']), chain(['a', 'a1', 'x', 'a2']), chain(['c', 'c1', 'z', 'c2'])]);
    // c1 saved b (a dropped: the oldest); a2 finds nothing (cold), and saves c… which c2 then restores.
    assert.deepEqual(r.map((x) => x.predicted), [0, 0, 0, 0, 200]);
  });

  it('a slot keeping half its prompt for a shared system prompt is overwritten: the other conversation’s tail is lost', () => {
    const sys = (u: string[]) => chain(['sys', ...u], 100);
    const m = model(1, { tokens: 10_000 });
    // The slot holds sys+a (200); b keeps sys (100 of 200: half), so the engine overwrites without saving a.
    const r = serial(m, [sys(['a']), sys(['b']), sys(['a', 'x', 'a2'])]);
    assert.deepEqual(r.map((x) => x.predicted), [0, 100, 100]);
  });

  it('--cache-idle-slots copies idle slots to RAM: their prompts survive a slot overwritten in place', () => {
    const sys = (u: string[]) => chain(['sys', ...u], 100);
    const m = model(2, { tokens: 10_000, idleSlots: true });
    const r = serial(m, [sys(['a']), sys(['b'])]);
    assert.deepEqual(r.map((x) => x.predicted), [0, 0], 'b took the empty slot');
    assert.ok((m.ramHeld?.() ?? []).some((l) => l.hash === 'sys/a'), 'a, idle when b started, was copied to RAM');
  });

  it('the digest lists the pool’s links apart from the slots’, newest first', () => {
    const m = model(1, { tokens: 10_000 });
    serial(m, [chain(['a', 'a1']), chain(['b', 'b1']), chain(['c', 'c1'])]);
    const ram = m.ramHeld?.() ?? [];
    assert.deepEqual([...new Set(ram.map((l) => l.hash.split('/')[0]))], ['b', 'a']);
    assert.equal(cacheModel({ kind: 'chosen', slots: 1 }).ramHeld?.(), undefined, 'no pool: none listed');
  });
});

describe('a slot parked in RAM and a prompt recalled from it, at the node’s asking (survive/slot-ram.ts)', () => {
  it('parked: the slot’s prompt goes to RAM and the slot holds nothing; its next turn is predicted restored', () => {
    const m = model(1, { tokens: 10_000 });
    serial(m, [chain(['a', 'a1'])]);
    assert.equal(m.parked?.(0), true);
    assert.deepEqual(m.slotContents?.(), [], 'the slot holds nothing of worth');
    assert.deepEqual(m.pooledContents?.().map((c) => c.links.at(-1)?.hash), ['a/a1']);
    // A restored file fills the slot; the parked conversation's next turn then comes back from RAM.
    m.restored?.(0, { slot: 0, links: chain(['b', 'b1']), promptLinks: 2, head: -1 }, clock * 1000);
    const [next] = serial(m, [chain(['a', 'a1', 'x', 'a2'])]);
    assert.equal(next.restored, 200);
    assert.equal(cacheModel({ kind: 'chosen', slots: 1 }).parked?.(0), false, 'no pool: nothing parked');
  });

  it('recalled: the RAM entry whose prompt ends at a link moves into the slot (its prompt, not its reply), the slot’s own prompt to RAM', () => {
    const m = model(1, { tokens: 10_000 });
    serial(m, [chain(['a', 'a1']), chain(['b', 'b1'])]);
    const back = m.recalled?.(0, 'a/a1', clock * 1000);
    assert.deepEqual(back?.links.map((l) => l.hash), ['a', 'a/a1']);
    assert.equal(back?.slot, 0);
    assert.deepEqual(m.slotContents?.().map((c) => c.links.at(-1)?.hash), ['a/a1']);
    assert.deepEqual(m.pooledContents?.().map((c) => c.links.at(-1)?.hash), ['b/b1']);
    assert.equal(m.recalled?.(0, 'z/z1', clock * 1000), undefined, 'a prompt the pool does not hold');
  });
});

describe('the slot choice with a RAM pool', () => {
  const idle = (tokens: number, shared: number, extra: Partial<SlotView> = {}): SlotView => ({ busy: false, tokens, shared, unique: tokens, idleMs: 1000, ...extra });

  it('a returning conversation held in RAM takes a held slot over an empty one (nothing is restored into an empty slot)', () => {
    const slots = withPool([idle(0, 0), idle(300, 0)], 500);
    const pick = chooseSlot(slots, live)!;
    assert.equal(pick.index, 1);
    assert.equal(pick.reused, 500);
    assert.equal(pick.restored, 500);
    assert.equal(pick.evicted?.pooled, true, 'the slot’s own conversation moves to RAM');
    assert.equal(expectedLoss(pick.evicted), 300 * RESTORE_SHARE, 'costing its restore, not its re-prefill');
  });

  it('a new conversation still takes an empty slot before a live one, even one the engine would save', () => {
    const pick = chooseSlot(withPool([idle(300, 0), idle(0, 0)], 0), live)!;
    assert.equal(pick.index, 1);
    assert.equal(pick.evicted, undefined);
  });

  it('a slot overwritten in place (it keeps half or more for a shared prefix) costs its tail in full', () => {
    // Slot 0 holds 200 tokens of which this prompt shares 120: not saved; slot 1 is empty.
    const pick = chooseSlot(withPool([idle(200, 120), idle(0, 0)], 0), live)!;
    assert.equal(pick.index, 1, 'the shared prefix does not buy a live conversation’s tail');
    const only = chooseSlot(withPool([idle(200, 120)], 0), live)!;
    assert.ok(only.evicted && !only.evicted.pooled, 'not moved to RAM');
    assert.equal(expectedLoss(only.evicted), 80);
  });

  it('without a pool the choice is today’s: the returning conversation takes the empty slot and runs cold', () => {
    const pick = chooseSlot([idle(0, 0), idle(300, 0)], live)!;
    assert.equal(pick.index, 0);
    assert.equal(pick.reused, 0);
  });
});
