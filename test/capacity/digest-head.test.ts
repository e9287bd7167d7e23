/**
 * Issue 25, item 6: a slot's head link (tools and system) on the wire, an
 * optional fifth and sixth element that an older reader ignores; and the
 * forward's `head` claim that tells the executor where a chain's head is.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decodeSlots, encodeSlots } from '../../src/capacity/digest.ts';
import { chainClaims, chainOfClaim, headOfClaim } from '../../src/prompt/chain-claim.ts';
import type { SlotHold } from '../../src/prompt/held.ts';

const H = (c: string) => c.repeat(16);

describe("a slot's head on the wire (issue 25, item 6)", () => {
  it('round-trips with its head, and without one as before', () => {
    const slots: SlotHold[] = [
      { last: { hash: H('a'), tokens: 900 }, head: { hash: H('b'), tokens: 300 }, unique: 600, busy: false, idleSince: 1000 },
      { last: { hash: H('c'), tokens: 400 }, unique: 400, busy: true },
      { unique: 0, busy: false },
    ];
    const wire = encodeSlots(slots, 1500);
    assert.deepEqual(wire[0], [H('a'), 900, 600, 500, H('b'), 300]);
    assert.equal(wire[1].length, 4);
    assert.deepEqual(decodeSlots(JSON.parse(JSON.stringify(wire)), 2000), [
      { last: { hash: H('a'), tokens: 900 }, head: { hash: H('b'), tokens: 300 }, unique: 600, busy: false, idleSince: 1500 },
      { last: { hash: H('c'), tokens: 400 }, unique: 400, busy: true },
      { unique: 0, busy: false, idleSince: 2000 },
    ]);
  });

  it('carries the link before the last after the head (a prompt grown inside its last message still continues the slot), ignored when malformed', () => {
    const s: SlotHold = { last: { hash: H('a'), tokens: 900 }, head: { hash: H('b'), tokens: 300 }, prev: { hash: H('d'), tokens: 800 }, unique: 600, busy: false, idleSince: 1000 };
    const wire = encodeSlots([s], 1500);
    assert.deepEqual(wire[0], [H('a'), 900, 600, 500, H('b'), 300, H('d'), 800]);
    assert.deepEqual(decodeSlots(JSON.parse(JSON.stringify(wire)), 2000)![0].prev, { hash: H('d'), tokens: 800 });
    assert.equal(decodeSlots([[H('a'), 900, 600, 500, H('b'), 300, 'nothex', 800]], 0)![0].prev, undefined);
  });

  it('a malformed head is ignored, as an older reader would', () => {
    const [s] = decodeSlots([[H('a'), 900, 600, 500, 'nothex', 300]], 0)!;
    assert.equal(s.head, undefined);
    assert.deepEqual(s.last, { hash: H('a'), tokens: 900 });
  });

  it('the head claim goes with the chain claim, and only names a link of it', () => {
    const chain = [{ hash: H('a'), tokens: 10 }, { hash: H('b'), tokens: 20 }];
    const c = chainClaims({ chain, chainHead: 1 });
    assert.deepEqual(chainOfClaim(c.chain), chain);
    assert.equal(headOfClaim(c.head, chain.length), 1);
    assert.deepEqual(chainClaims({ chain, chainHead: 5 }), { chain: c.chain });
    assert.deepEqual(chainClaims({ chain: [] , chainHead: 0 }), {});
    assert.equal(headOfClaim('2', 2), undefined);
    assert.equal(headOfClaim('-1', 2), undefined);
    assert.equal(headOfClaim(undefined, 2), undefined);
  });
});
