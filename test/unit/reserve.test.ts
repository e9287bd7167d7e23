/**
 * Room kept for interactive work (queue/reserve.ts; docs/decisions.md, "Room
 * for interactive turns"): the rule as tables, the gate that applies it over
 * a fake slot pool, and an entry's view of a host that holds slots back
 * (route/eligibility.ts).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Band, Flow } from '../../src/queue/fair.ts';
import { SlotGate } from '../../src/queue/gate.ts';
import { heldBack, mayTakeSlot, ReserveBook, trackedLease, type InteractiveRecord, type ReserveRule } from '../../src/queue/reserve.ts';
import { candidates, forwardsIn } from '../../src/route/eligibility.ts';
import type { HostView, TargetView } from '../../src/route/types.ts';

const rule: ReserveRule = { slots: 1, forMs: 30_000 };

describe('heldBack', () => {
  const rec = (lastAt: number, running = 0, peak = 0): InteractiveRecord => ({ lastAt, running, peak });
  const table: [string, ReserveRule, number, InteractiveRecord | undefined, number, number][] = [
    ['no interactive request seen: nothing held', rule, 4, undefined, 1_000, 0],
    ['one seen a moment ago: the rule’s slots held', rule, 4, rec(900), 1_000, 1],
    ['seen just inside the window: still held', rule, 4, rec(0), 29_999, 1],
    ['the window passed: nothing held', rule, 4, rec(0), 30_000, 0],
    ['a one-slot target never holds its only slot', rule, 1, rec(900), 1_000, 0],
    ['two ran at once lately, none runs now: room for two', rule, 4, rec(900, 0, 2), 1_000, 2],
    ['two ran at once lately, one runs now: room for one more', rule, 4, rec(900, 1, 2), 1_000, 1],
    ['three ran at once lately: room for three, but never all four slots', rule, 4, rec(900, 0, 3), 1_000, 3],
    ['four ran at once lately: still never all slots', rule, 4, rec(900, 0, 4), 1_000, 3],
    ['the rule’s slots are the least held, whatever the peak', { slots: 2, forMs: 30_000 }, 8, rec(900, 1, 1), 1_000, 2],
    ['never all slots: three asked of three, two held', { slots: 3, forMs: 30_000 }, 3, rec(900), 1_000, 2],
    ['a target with no healthy slot holds none', rule, 0, rec(900, 0, 2), 1_000, 0],
    ['reserve 0: off, whatever ran', { slots: 0, forMs: 30_000 }, 4, rec(900, 0, 3), 1_000, 0],
  ];
  for (const [name, r, slots, record, now, want] of table) it(name, () => assert.equal(heldBack(r, slots, record, now), want));
});

describe('mayTakeSlot', () => {
  const table: [Band, number, number, boolean][] = [
    ['batch', 2, 1, true],
    ['batch', 1, 1, false],
    ['batch', 0, 0, false],
    ['batch', 3, 0, true],
    ['interactive', 1, 1, true],
    ['interactive', 0, 0, false],
  ];
  for (const [band, free, held, want] of table) it(`${band} with ${free} free, ${held} held back: ${want ? 'takes one' : 'does not'}`, () => assert.equal(mayTakeSlot(band, free, held), want));
});

describe('ReserveBook', () => {
  it('holds back from the moment an interactive request asks until the window after the last one', () => {
    let now = 0;
    const book = new ReserveBook(() => rule, () => now);
    assert.equal(book.held('m', 4), 0);
    now = 1_000;
    book.note('m');
    assert.equal(book.held('m', 4), 1);
    assert.equal(book.held('other', 4), 0, 'per model');
    now = 20_000;
    book.note('m');
    now = 45_000;
    assert.equal(book.held('m', 4), 1, 'the window counts from the last interactive request');
    now = 50_000;
    assert.equal(book.held('m', 4), 0);
  });

  it('keeps room for as many interactive requests as ran at once lately, counting those running now', () => {
    let now = 1_000;
    const book = new ReserveBook(() => rule, () => now);
    book.note('m');
    const a = trackedLease(book, 'm', { release() {} });
    book.note('m');
    const b = trackedLease(book, 'm', { release() {} });
    assert.equal(book.held('m', 8), 1, 'two run, the peak is two: the rule’s one slot');
    a.release();
    a.release();
    assert.equal(book.record('m')?.running, 1, 'a lease released twice counts once');
    assert.equal(book.held('m', 8), 1);
    b.release();
    assert.equal(book.held('m', 8), 2, 'none runs: room for the two that ran at once');
    now += 20_000;
    book.note('m');
    assert.equal(book.held('m', 8), 2, 'the peak holds within the window');
    now += 15_000;
    book.note('m');
    assert.equal(book.held('m', 8), 1, 'a peak older than the window falls to what runs now, and the rule’s slot stays');
  });

  it('publishes the room only while batch requests also ask here, and batch alone holds nothing back', () => {
    let now = 1_000;
    const book = new ReserveBook(() => rule, () => now);
    book.noteBatch('m');
    assert.equal(book.held('m', 4), 0, 'batch alone: no room held');
    assert.equal(book.published('m', 4), 0);
    const only = new ReserveBook(() => rule, () => now);
    only.note('m');
    assert.equal(only.held('m', 4), 1);
    assert.equal(only.published('m', 4), 0, 'interactive alone: held, but nothing for a report to say');
    book.note('m');
    assert.equal(book.published('m', 4), 1, 'both: the report says what is held');
    now += rule.forMs;
    book.note('m');
    assert.equal(book.held('m', 4), 1);
    assert.equal(book.published('m', 4), 0, 'no batch request within the window: not published');
  });

  it('reads the rule at each use, so a reloaded config takes effect at once', () => {
    let r: ReserveRule = rule;
    const book = new ReserveBook(() => r, () => 5);
    book.note('m');
    assert.equal(book.held('m', 8), 1);
    r = { slots: 3, forMs: 30_000 };
    assert.equal(book.held('m', 8), 3);
    r = { slots: 0, forMs: 30_000 };
    assert.equal(book.held('m', 8), 0);
  });
});

const flow = (key: string, band: Band = 'interactive'): Flow => ({ key, band, weight: 1, cost: 100 });

/** A gate over a pool of `slots` in-memory slots of one model, with the room rule on a clock the test moves. */
function pool(slots: number, r: ReserveRule = rule) {
  let free = slots;
  let now = 1_000;
  const book = new ReserveBook(() => r, () => now);
  const gate = new SlotGate<string, string>({
    lease: (_m, _w, key) => {
      if (free === 0) return undefined;
      free--;
      return key ?? 'anon';
    },
    now: () => now,
    reserve: { book, room: (m) => ({ free, held: Math.min(free, book.held(m, slots)) }) },
  });
  return {
    gate,
    get free() {
      return free;
    },
    release() {
      free++;
      gate.pump();
    },
    advance(ms: number) {
      now += ms;
    },
  };
}

describe('the gate keeps room for interactive work', () => {
  it('a batch-only fleet runs at full width: nothing is held before an interactive request comes', () => {
    const p = pool(3);
    assert.equal(p.gate.tryLease('m', 'chat', 'b1', flow('batch', 'batch')), 'b1');
    assert.equal(p.gate.tryLease('m', 'chat', 'b2', flow('batch', 'batch')), 'b2');
    assert.equal(p.gate.tryLease('m', 'chat', 'b3', flow('batch', 'batch')), 'b3');
  });

  it('after an interactive request, batch may not take the last free slot; the next interactive one may', () => {
    const p = pool(3);
    assert.equal(p.gate.tryLease('m', 'chat', 'i1', flow('agent')), 'i1');
    assert.equal(p.gate.tryLease('m', 'chat', 'b1', flow('batch', 'batch')), 'b1');
    assert.equal(p.gate.tryLease('m', 'chat', 'b2', flow('batch', 'batch')), undefined, 'the last free slot is held back');
    assert.equal(p.free, 1);
    assert.equal(p.gate.tryLease('m', 'chat', 'i2'), 'i2', 'an anonymous request is interactive and takes it');
    assert.equal(p.free, 0);
  });

  it('once the window passes with no interactive request, batch takes every slot again', () => {
    const p = pool(2);
    p.gate.tryLease('m', 'chat', 'i1', flow('agent'));
    p.release();
    assert.equal(p.gate.tryLease('m', 'chat', 'b1', flow('batch', 'batch')), 'b1');
    assert.equal(p.gate.tryLease('m', 'chat', 'b2', flow('batch', 'batch')), undefined);
    p.advance(rule.forMs);
    assert.equal(p.gate.tryLease('m', 'chat', 'b2', flow('batch', 'batch')), 'b2');
  });

  it('a batch forward waiting in the line is not granted a held slot; an interactive waiter is, and batch gets the next', async () => {
    const p = pool(3);
    p.gate.tryLease('m', 'chat', 'i1', flow('agent'));
    p.gate.tryLease('m', 'chat', 'b1', flow('batch', 'batch'));
    p.gate.tryLease('m', 'chat', 'i2');
    assert.equal(p.free, 0);
    const batch = p.gate.wait('m', 'chat', 'b2', flow('batch', 'batch'), 60_000);
    p.release(); // i1 ends: one free slot, held back
    assert.equal(p.free, 1, 'the held slot was not granted to the batch waiter');
    const i = await p.gate.wait('m', 'chat', 'i3', flow('agent'), 60_000);
    assert.ok(i.ok && i.lease === 'i3', 'an interactive waiter gets the held slot at once');
    p.release(); // b1 ends: one free, held back again
    assert.equal(p.free, 1);
    p.release(); // i2 ends: two free, one held back, so the batch waiter gets one
    const b = await batch;
    assert.ok(b.ok && b.lease === 'b2');
    assert.equal(p.free, 1);
  });

  it('with interactive_reserve 0, batch takes any free slot', () => {
    const p = pool(2, { slots: 0, forMs: 30_000 });
    p.gate.tryLease('m', 'chat', 'i1', flow('agent'));
    assert.equal(p.gate.tryLease('m', 'chat', 'b1', flow('batch', 'batch')), 'b1');
  });
});

describe('an entry sees the slots a host holds back, for its batch requests only', () => {
  const target = (slots: number, busy: number, reserved?: number): TargetView => ({ descriptor: { workloads: ['chat', 'completion'], audio: false }, slots, busy, ...(reserved ? { reserved } : {}) });
  const host = (name: string, t: TargetView, local = false): HostView => ({ name, local, rttMs: 1, fresh: true, polledAt: 0, models: new Map([['m', { targets: [t], slots: t.slots, busy: t.busy }]]) });
  const hosts = [host('a', target(4, 3, 1)), host('b', target(4, 2, 1)), host('c', target(4, 3), true)];
  const inputs = { hosts, forwards: forwardsIn([]), marks: [] };

  it('an interactive request counts every free slot', () => {
    assert.deepEqual(
      candidates(inputs, 'm', 'chat').map((c) => [c.host, c.free]),
      [
        ['a', 1],
        ['b', 2],
        ['c', 1],
      ],
    );
  });

  it('a batch request counts a host’s free slots less those it holds back', () => {
    assert.deepEqual(
      candidates(inputs, 'm', 'chat', true).map((c) => [c.host, c.free]),
      [
        ['a', 0],
        ['b', 1],
        ['c', 1],
      ],
    );
  });
});
