/**
 * Issue 25, item 6: the executor's record holds the assistant's reply after
 * the prompt its engine cached, so the next turn's predicted cached tokens
 * reach through it; a reply the client did not echo as it came leaves the
 * turn a continuation of its slot, reusing the prompt.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { cacheModel, ReplyCredit, withReply, type CacheModelKind } from '../../src/engines/cache-model.ts';
import type { ChainLink, PrefixChain } from '../../src/prompt/held.ts';

/** Links named by the messages so far ("s", "s/u1", ...), each message 100 tokens; a reply is a message too. */
const chain = (messages: string[]): PrefixChain => messages.map((_, i) => ({ hash: messages.slice(0, i + 1).join('/'), tokens: (i + 1) * 100 }));
const link = (messages: string[]): ChainLink => chain(messages).at(-1)!;

let clock = 0;

describe("the reply in the executor's record (issue 25, item 6)", () => {
  const cases: { name: string; promptTokens?: number; next: number }[] = [
    // The engine counted 220 prompt tokens for the chain's 200: the reply's 100 chain tokens, less the assistant's
    // opening the prompt already ended with (3.5), scale the same way.
    { name: "the engine's prompt count", promptTokens: 220, next: 220 + Math.round(96.5 * 1.1) },
    { name: 'no count at all', next: 200 + Math.round(96.5) },
  ];
  for (const kind of ['chosen', 'llama', 'lifo', 'blocks'] as CacheModelKind[]) {
    for (const c of cases) {
      it(`${kind}, ${c.name}: the next turn's predicted cached tokens reach through the reply`, () => {
        const m = cacheModel({ kind, slots: 2 });
        const first = chain(['s', 'u1']);
        const t1 = m.begin(first, ++clock, 0);
        m.finish(t1, { processed: true, promptTokens: c.promptTokens, cachedTokens: 0, reply: link(['s', 'u1', 'a1']) }, ++clock, 10);
        const t2 = m.begin(chain(['s', 'u1', 'a1', 'u2']), ++clock, 20);
        assert.equal(t2.predicted, c.next);
        if (kind !== 'blocks') assert.equal(t2.slot, t1.slot);
      });
    }
  }

  it('chosen: a slot holding the reply tells its prompt end as its last link, and publishes the reply in held()', () => {
    const m = cacheModel({ kind: 'chosen', slots: 2 });
    const t = m.begin(chain(['s', 'u1']), ++clock, 0);
    m.finish(t, { processed: true, reply: link(['s', 'u1', 'a1']) }, ++clock, 10);
    const slot = m.slotStates!()[t.slot!];
    assert.deepEqual(slot.last, link(['s', 'u1']));
    assert.equal(slot.unique, 297, 'taking it destroys the reply too');
    assert.ok(m.held().some((l) => l.hash === 's/u1/a1' && l.tokens === 297));
  });

  it('chosen: a turn whose client changed the reply still continues its slot (an empty one is there) and reuses the prompt', () => {
    const evictions: unknown[] = [];
    const m = cacheModel({
      kind: 'chosen',
      slots: 2,
      // route/slots.ts's rule in small: a continuation first, else an empty slot.
      choose: (views) => {
        const cont = views.findIndex((v) => !v.busy && v.tokens > 0 && v.shared >= v.tokens);
        if (cont >= 0) return { index: cont };
        evictions.push(views); // the first turn's, and none after
        return { index: views.findIndex((v) => !v.busy && v.tokens === 0) };
      },
    });
    const t1 = m.begin(chain(['s', 'u1']), ++clock, 0);
    m.finish(t1, { processed: true, reply: link(['s', 'u1', 'a1']) }, ++clock, 10);
    evictions.length = 0;
    const t2 = m.begin(chain(['s', 'u1', 'a1-edited', 'u2']), ++clock, 20);
    assert.equal(t2.slot, t1.slot);
    assert.equal(t2.predicted, 200);
    assert.equal(evictions.length, 0);
  });

  it('an engine seen to reuse none of the echoed replies is credited less for them, turn by turn', () => {
    const m = cacheModel({ kind: 'chosen', slots: 1 });
    const msgs = ['s', 'u1'];
    const errors: number[] = [];
    for (let turn = 1; turn <= 6; turn++) {
      const c = chain(msgs);
      const t = m.begin(c, ++clock, 0);
      // This engine parts from the next prompt where the reply begins: it reuses the previous prompt only.
      const reused = turn === 1 ? 0 : (c.length - 2) * 100;
      errors.push(t.predicted - reused);
      m.finish(t, { processed: true, cachedTokens: reused, reply: link([...msgs, `a${turn}`]) }, ++clock, 10);
      msgs.push(`a${turn}`, `u${turn + 1}`);
    }
    assert.equal(errors[1], 97, 'at first a reply counts whole');
    assert.ok(errors.slice(1).every((e, i, a) => i === 0 || e < a[i - 1]), `the error shrinks: ${errors}`);
    assert.ok(errors[5] < 0.35 * errors[1], `${errors}`);
  });

  it('ReplyCredit: a quarter of the way per turn, down and back up', () => {
    const c = new ReplyCredit();
    c.observe(100, 200, 100);
    assert.equal(c.share, 0.75);
    for (let i = 0; i < 8; i++) c.observe(100, 200, 100);
    assert.ok(c.share < 0.1);
    for (let i = 0; i < 8; i++) c.observe(100, 200, 200);
    assert.ok(c.share > 0.9);
    c.observe(100, 100, 50);
    assert.ok(c.share > 0.9, 'a reply of no tokens says nothing');
  });

  it('a request abandoned before its answer records no reply', () => {
    const m = cacheModel({ kind: 'chosen', slots: 1 });
    const t = m.begin(chain(['s', 'u1']), ++clock, 0);
    m.finish(t, { processed: false, reply: link(['s', 'u1', 'a1']) }, ++clock, 10);
    assert.ok(!m.held().some((l) => l.hash === 's/u1/a1'));
  });

  it('withReply: a reply link not past the prompt is ignored', () => {
    const c = chain(['s', 'u1']);
    assert.deepEqual(withReply(c, c, { processed: true, reply: { hash: 'x', tokens: 50 } }), c);
  });
});
