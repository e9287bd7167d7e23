/** The executor's engine cache models (issue 17, item 2): tables of requests in, slot choices and predicted reuse out. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { cacheModel, isMiss, sampledIndices, scaleChain, type CacheModel, type CacheModelKind } from '../../src/engines/cache-model.ts';
import type { PrefixChain } from '../../src/prompt/held.ts';
import { chooseSlot, TurnGaps } from '../../src/route/slots.ts';

/** A chain whose links are named by the messages so far ("s", "s/u1", ...), each message `each` tokens. */
function chain(messages: string[], each = 100): PrefixChain {
  return messages.map((_, i) => ({ hash: messages.slice(0, i + 1).join('/'), tokens: (i + 1) * each }));
}

/** Run requests one after another: begin, then finish with what the model predicted (an engine that agrees). */
let clock = 0;
function serial(m: CacheModel, chains: PrefixChain[]): { slot?: number; predicted: number }[] {
  return chains.map((c) => {
    const t = m.begin(c, ++clock);
    m.finish(t, { processed: true, cachedTokens: t.predicted }, ++clock);
    return { slot: t.slot, predicted: t.predicted };
  });
}

describe('slot models (llama-server, node-chosen, sim)', () => {
  for (const kind of ['llama', 'chosen'] as CacheModelKind[]) {
    it(`${kind}: a conversation's next turn lands on its slot and reuses its whole previous prompt`, () => {
      const m = cacheModel({ kind, slots: 2 });
      const [a1, b1, a2, b2] = serial(m, [chain(['s', 'a']), chain(['t', 'b']), chain(['s', 'a', 'x', 'a2']), chain(['t', 'b', 'y', 'b2'])]);
      assert.deepEqual([a1.predicted, b1.predicted], [0, 0]);
      assert.equal(a2.slot, a1.slot);
      assert.equal(a2.predicted, 200);
      assert.equal(b2.slot, b1.slot);
      assert.equal(b2.predicted, 200);
      assert.notEqual(a1.slot, b1.slot, 'the second conversation took the least recently used slot');
    });
  }

  it('llama: a shared prefix at or under the similarity share does not attract; the least recently used slot is taken', () => {
    const cases: { name: string; second: string[]; similarity?: number; predicted: number; sameSlot: boolean }[] = [
      { name: 'shares 1 of 4 messages (25%)', second: ['s', 'q', 'r', 'z'], predicted: 0, sameSlot: false },
      { name: 'shares 2 of 3 (67%)', second: ['s', 'a', 'z'], predicted: 200, sameSlot: true },
      { name: 'shares 1 of 2 (50%, not more)', second: ['s', 'z'], predicted: 0, sameSlot: false },
      { name: 'shares 1 of 2 with similarity 0.3', second: ['s', 'z'], similarity: 0.3, predicted: 100, sameSlot: true },
    ];
    for (const c of cases) {
      const m = cacheModel({ kind: 'llama', slots: 2, similarity: c.similarity });
      const [first, second] = serial(m, [chain(['s', 'a']), chain(c.second)]);
      assert.equal(second.predicted, c.predicted, c.name);
      assert.equal(second.slot === first.slot, c.sameSlot, c.name);
    }
  });

  it('one slot: another conversation in between evicts the first (its next turn is predicted cold)', () => {
    const m = cacheModel({ kind: 'chosen', slots: 1 });
    const r = serial(m, [chain(['s', 'a']), chain(['t', 'b']), chain(['s', 'a', 'x', 'a2'])]);
    assert.deepEqual(r.map((x) => x.predicted), [0, 0, 0]);
  });

  it('a named slot the engine found empty means its cache was lost (an erase, a restart): every idle slot is forgotten', () => {
    const setup = () => {
      const m = cacheModel({ kind: 'chosen', slots: 3, choose: (s) => chooseSlot(s, () => 1) });
      serial(m, [chain(['s', 'a'], 1000), chain(['t', 'b'], 1000), chain(['u', 'c'], 1000)]);
      return m;
    };
    // The engine reused nothing of the 2,000 tokens the model expected in the conversation's own slot.
    const erased = setup();
    const t = erased.begin(chain(['s', 'a', 'd'], 1000), ++clock);
    assert.equal(t.predicted, 2000);
    erased.finish(t, { processed: true, cachedTokens: 0, promptTokens: 3000 }, ++clock);
    assert.equal(erased.begin(chain(['t', 'b', 'e'], 1000), ++clock).predicted, 0, 'the other conversations are gone from the engine, and from the model');
    // A miss that still reused the template's first tokens is another slot's content, not a lost cache: the others stay.
    const missed = setup();
    const t2 = missed.begin(chain(['s', 'a', 'd'], 1000), ++clock);
    missed.finish(t2, { processed: true, cachedTokens: 7, promptTokens: 3000 }, ++clock);
    assert.equal(missed.begin(chain(['t', 'b', 'e'], 1000), ++clock).predicted, 2000);
  });

  it('a busy slot is not chosen; a request beyond the slots is predicted cold and changes nothing', () => {
    const m = cacheModel({ kind: 'chosen', slots: 1 });
    serial(m, [chain(['s', 'a'])]);
    const t1 = m.begin(chain(['s', 'a', 'x']), ++clock);
    assert.equal(t1.predicted, 200);
    const t2 = m.begin(chain(['s', 'a', 'y']), ++clock);
    assert.deepEqual([t2.slot, t2.predicted], [undefined, 0]);
    const before = m.changes;
    m.finish(t2, { processed: true }, ++clock);
    assert.equal(m.changes, before);
  });

  it('a request abandoned during prefill leaves its slot holding only what it reused', () => {
    const m = cacheModel({ kind: 'chosen', slots: 1 });
    serial(m, [chain(['s', 'a'])]);
    const t = m.begin(chain(['s', 'b', 'c']), ++clock);
    m.finish(t, { processed: false, cachedTokens: 100 }, ++clock);
    assert.deepEqual(m.held().map((h) => h.hash), ['s']);
  });

  it("the engine's prompt tokens rescale the digest; its cached count corrects a wrong belief (llama)", () => {
    const m = cacheModel({ kind: 'llama', slots: 2 });
    let t = m.begin(chain(['s', 'a']), ++clock);
    m.finish(t, { processed: true, promptTokens: 150, cachedTokens: 0 }, ++clock);
    assert.deepEqual(m.held().map((h) => [h.hash, h.tokens]), [['s/a', 150], ['s', 75]]);
    // The model expects a reuse of 150; the engine says 0 (it placed the request elsewhere): the belief goes.
    t = m.begin(chain(['s', 'a', 'x']), ++clock);
    assert.equal(t.predicted, 150);
    m.finish(t, { processed: true, promptTokens: 300, cachedTokens: 0 }, ++clock);
    assert.deepEqual(m.held().map((h) => h.hash), ['s/a/x', 's/a', 's'], 'only the request just run is held (in one slot)');
  });

  it('lifo (embedded): the sequence freed last is handed out first, as the pool does', () => {
    const m = cacheModel({ kind: 'lifo', slots: 3 });
    const r = serial(m, [chain(['a']), chain(['b']), chain(['a', 'x'])]);
    assert.deepEqual(r.map((x) => x.slot), [2, 2, 2]);
    assert.deepEqual(r.map((x) => x.predicted), [0, 0, 0], 'b evicted a: one sequence reused');
    // Two at once: the second takes the next one on the stack.
    const t1 = m.begin(chain(['a', 'x', 'y']), ++clock);
    const t2 = m.begin(chain(['c']), ++clock);
    assert.deepEqual([t1.slot, t1.predicted, t2.slot], [2, 200, 1]);
  });

  it('held(): most recently used slot first, deepest link first, each hash once', () => {
    const m = cacheModel({ kind: 'chosen', slots: 2 });
    serial(m, [chain(['s', 'a']), chain(['s', 'b', 'c', 'd'])]);
    assert.deepEqual(m.held().map((h) => h.hash), ['s/b/c/d', 's/b/c', 's/b', 's', 's/a']);
  });

  it('held(): a running request marks what only its slot holds short of its last link busy (a new request gets a free slot); its follow-up still finds it', () => {
    const m = cacheModel({ kind: 'chosen', slots: 2 });
    const run = m.begin(chain(['s', 'a', 'b']), ++clock);
    const busy = () => new Map(m.held().map((h) => [h.hash, h.busy === true]));
    assert.deepEqual([...busy()], [['s/a/b', false], ['s/a', true], ['s', true]]);
    m.finish(run, { processed: true, cachedTokens: 0 }, ++clock);
    assert.deepEqual([...busy()].filter(([, b]) => b), [], 'ended: its slot is free, nothing is busy');
    // A free slot holding the shared system prompt: that link is not busy while the other slot runs.
    const m2 = cacheModel({ kind: 'chosen', slots: 2 });
    serial(m2, [chain(['s', 'x'])]);
    m2.begin(chain(['s', 'y', 'z']), ++clock);
    const held = new Map(m2.held().map((h) => [h.hash, h.busy === true]));
    assert.equal(held.get('s'), false);
    assert.equal(held.get('s/y'), true);
    assert.equal(held.get('s/y/z'), false);
  });

  it('a long conversation publishes its last links, then ever further back, and its first', () => {
    assert.deepEqual(sampledIndices(50), [49, 48, 47, 45, 41, 33, 17, 0]);
    assert.deepEqual(sampledIndices(3), [2, 1, 0]);
    assert.deepEqual(sampledIndices(0), []);
    const m = cacheModel({ kind: 'chosen', slots: 1 });
    const long = Array.from({ length: 50 }, (_, i) => `m${i}`);
    serial(m, [chain(long)]);
    assert.equal(m.held().length, 8);
    // Its next turn finds all of it; an edit at message 40 still finds 33 messages' worth; the system prompt is there.
    const t = m.begin(chain([...long, 'next']), ++clock);
    assert.equal(t.predicted, 5000);
    m.finish(t, { processed: true, cachedTokens: 5000 }, ++clock);
    const held = new Map(m.held().map((h) => [h.hash, h.tokens]));
    assert.ok(held.has('m0'));
    assert.ok([...held.keys()].some((h) => h.split('/').length >= 34 && h.split('/').length <= 40));
  });
});

describe('block cache (vLLM-like openai engines)', () => {
  it('shared prefixes are held once; least recently used out, deepest links first', () => {
    const m = cacheModel({ kind: 'blocks', slots: 4, budgetTokens: 400 });
    const r = serial(m, [chain(['s', 'a']), chain(['s', 'b']), chain(['s', 'a', 'x'])]);
    assert.deepEqual(r.map((x) => x.predicted), [0, 100, 200]);
    // s, s/a, s/b, s/a/x = 400 tokens: full. A fourth prompt of 200 new tokens evicts s/b (oldest), then... s/a/x is newest.
    serial(m, [chain(['t', 'c'])]);
    const held = m.held().map((h) => h.hash);
    assert.deepEqual(held.slice(0, 2), ['t', 't/c']);
    assert.ok(!held.includes('s/b'), 'the least recently used link went first');
    assert.ok(held.length * 100 <= 400, 'within the budget');
  });

  it('a miss shrinks the budget to what the engine really kept', () => {
    const m = cacheModel({ kind: 'blocks', slots: 1 });
    serial(m, [chain(['a', 'b', 'c']), chain(['d', 'e', 'f'])]);
    const t = m.begin(chain(['a', 'b', 'c', 'g']), ++clock);
    assert.equal(t.predicted, 300);
    m.finish(t, { processed: true, cachedTokens: 0 }, ++clock);
    // The engine had dropped a/b/c: it holds about 300 tokens; what is held now fits that.
    const t2 = m.begin(chain(['d', 'e', 'f', 'h']), ++clock);
    assert.equal(t2.predicted, 0, 'the budget forgot d/e/f');
  });
});

describe('helpers', () => {
  it('isMiss: more than 10% of the prompt (at least 16 tokens) under the prediction', () => {
    assert.equal(isMiss(200, 190, 1000), false);
    assert.equal(isMiss(200, 50, 1000), true);
    assert.equal(isMiss(20, 0, 50), true);
    assert.equal(isMiss(10, 0, 50), false);
  });
  it('scaleChain: to the engine tokens of the whole prompt', () => {
    assert.deepEqual(scaleChain(chain(['a', 'b']), 100), [{ hash: 'a', tokens: 50 }, { hash: 'a/b', tokens: 100 }]);
    assert.deepEqual(scaleChain(chain(['a']), undefined), chain(['a']));
  });
});

describe('the node’s slot choice in the executor’s model (issue 25)', () => {
  it('keeps each conversation in its slot, tells the gaps between turns, and publishes each slot’s state', () => {
    const gaps = new TurnGaps();
    const m = cacheModel({ kind: 'chosen', slots: 2, choose: (s) => chooseSlot(s, gaps.chance), onGap: (ms) => gaps.observe(ms) });
    let ms = 1000;
    let n = 0;
    const run = (c: PrefixChain) => {
      const t = m.begin(c, ++n, ms);
      ms += 200; // the turn runs
      m.finish(t, { processed: true, cachedTokens: t.predicted }, ++n, ms);
      ms += 700; // think time
      return t;
    };
    // Two conversations on one system prompt: llama-server's rule would put the second in the first's slot.
    const a1 = run(chain(['s', 'a1']));
    const b1 = run(chain(['s', 'b1']));
    assert.notEqual(a1.slot, b1.slot, 'the second takes the empty slot, not the live first one');
    const a2 = run(chain(['s', 'a1', 'r', 'a2']));
    const b2 = run(chain(['s', 'b1', 'r', 'b2']));
    assert.deepEqual([a2.slot, a2.predicted, b2.slot, b2.predicted], [a1.slot, 200, b1.slot, 200]);
    assert.equal(gaps.size, 2, 'each continued turn told its gap');
    const states = m.slotStates!();
    assert.deepEqual(
      states.map((s) => [s.last?.hash, s.last?.tokens, s.unique, s.busy, ms - s.idleSince!]),
      [
        [a1.slot === 0 ? 's/a1/r/a2' : 's/b1/r/b2', 400, 300, false, a1.slot === 0 ? 1600 : 700],
        [a1.slot === 0 ? 's/b1/r/b2' : 's/a1/r/a2', 400, 300, false, a1.slot === 0 ? 700 : 1600],
      ],
    );
  });
});
