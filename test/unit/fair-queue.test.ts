/** Fair queueing and priority (SPEC section 12): the pure order (queue/fair.ts) as tables, and the wait queue that uses it. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { charge, liftedCounter, serviceCost, serviceOrder, type Band, type Flow } from '../../src/queue/fair.ts';
import { WaitQueue } from '../../src/queue/fifo.ts';

const w = (key: string, band: Band = 'interactive') => ({ key, band });

describe('serviceOrder', () => {
  const table: { name: string; waiters: { key: string; band: Band }[]; counters: Record<string, number>; order: number[] }[] = [
    { name: 'one anonymous flow: arrival order', waiters: [w('anonymous'), w('anonymous'), w('anonymous')], counters: {}, order: [0, 1, 2] },
    { name: 'interactive before batch, whatever the counters', waiters: [w('b', 'batch'), w('i'), w('b', 'batch'), w('i')], counters: { b: 0, i: 1e9 }, order: [1, 3, 0, 2] },
    { name: 'inside a band, the lowest counter first', waiters: [w('heavy'), w('light'), w('heavy')], counters: { heavy: 500, light: 10 }, order: [1, 0, 2] },
    { name: 'equal counters: the key whose oldest waiter came first', waiters: [w('x'), w('y'), w('x'), w('y')], counters: { x: 5, y: 5 }, order: [0, 2, 1, 3] },
    { name: 'inside one key, arrival order', waiters: [w('k'), w('k'), w('k')], counters: { k: 3 }, order: [0, 1, 2] },
    { name: 'a batch key never jumps an interactive one', waiters: [w('bat', 'batch'), w('int')], counters: { bat: 0, int: 100 }, order: [1, 0] },
  ];
  for (const t of table) it(t.name, () => assert.deepEqual(serviceOrder(t.waiters, new Map(Object.entries(t.counters))), t.order));
});

describe('service and counters', () => {
  it('cost is uncached prompt + 2 × output, charged divided by weight', () => {
    assert.equal(serviceCost(100, 50), 200);
    assert.equal(serviceCost(-5, 10), 20);
    assert.equal(charge({ cost: 300, weight: 3 }), 100);
  });
  const lifts: [string, number | undefined, { key: string; band: Band }[], Record<string, number>, number][] = [
    ['a new key is lifted to the lowest backlogged counter', undefined, [w('a'), w('b')], { a: 40, b: 70 }, 40],
    ['never lowered', 90, [w('a')], { a: 40 }, 90],
    ['nothing waiting: keeps its own', 12, [], {}, 12],
    ['keys of another band do not lift it', undefined, [w('a', 'batch')], { a: 40 }, 0],
  ];
  for (const [name, own, waiting, counters, want] of lifts) it(name, () => assert.equal(liftedCounter(own, 'new', 'interactive', waiting, new Map(Object.entries(counters))), want));
});

/** A queue with `slots` free slots a test hands out one by one; every placement records its flow's key. */
function harness(q: WaitQueue<string>, t: { after(fn: () => void): void }) {
  // The waiters left when a test ends are let go, so no 60 s deadline keeps the run alive.
  const gone = new AbortController();
  t.after(() => gone.abort());
  let free = 0;
  const served: string[] = [];
  const enqueue = (flow: Flow) => {
    void q.enqueue(() => (free > 0 ? (free--, served.push(flow.key), flow.key) : undefined), { flow, signal: gone.signal });
  };
  const release = (n: number) => {
    for (let i = 0; i < n; i++) {
      free++;
      q.pump();
    }
  };
  return { enqueue, release, served };
}

describe('the wait queue, fair', () => {
  it('two backlogged keys of weight 1 and 3 are served 1:3 (by tokens)', (t) => {
    const q = new WaitQueue<string>(1000, 60_000);
    const h = harness(q, t);
    for (let i = 0; i < 200; i++) {
      h.enqueue({ key: 'w1', band: 'interactive', weight: 1, cost: 100 });
      h.enqueue({ key: 'w3', band: 'interactive', weight: 3, cost: 100 });
    }
    h.release(100);
    const w3 = h.served.filter((k) => k === 'w3').length;
    assert.equal(h.served.length, 100);
    assert.ok(Math.abs(w3 / 100 - 0.75) <= 0.02, `w3 got ${w3} of 100`);
  });

  it('a flooding batch key does not delay an interactive one: each freed slot goes to the interactive waiter first', (t) => {
    const q = new WaitQueue<string>(1000, 60_000);
    const h = harness(q, t);
    for (let i = 0; i < 50; i++) h.enqueue({ key: 'flood', band: 'batch', weight: 1, cost: 10 });
    h.release(5);
    h.enqueue({ key: 'agent', band: 'interactive', weight: 1, cost: 1000 });
    h.release(1);
    assert.equal(h.served.at(-1), 'agent');
  });

  it('a key that starts waiting again gains nothing from its idle time', (t) => {
    const q = new WaitQueue<string>(1000, 60_000);
    const h = harness(q, t);
    for (let i = 0; i < 20; i++) h.enqueue({ key: 'steady', band: 'interactive', weight: 1, cost: 100 });
    h.release(10); // steady's counter is now 1000
    for (let i = 0; i < 10; i++) h.enqueue({ key: 'late', band: 'interactive', weight: 1, cost: 100 });
    h.release(10);
    const late = h.served.slice(10).filter((k) => k === 'late').length;
    // Lifted to steady's counter, late shares alternately instead of taking all ten.
    assert.ok(late >= 4 && late <= 6, `late got ${late} of 10`);
  });

  it('settling moves a key by what it used beyond its estimate', (t) => {
    const q = new WaitQueue<string>(1000, 60_000);
    const h = harness(q, t);
    for (let i = 0; i < 3; i++) h.enqueue({ key: 'a', band: 'interactive', weight: 2, cost: 100 });
    h.release(1);
    assert.equal(q.counters().get('a'), 50);
    q.settle({ key: 'a', weight: 2 }, 100);
    assert.equal(q.counters().get('a'), 100);
    q.settle({ key: 'a', weight: 2 }, -1000);
    assert.equal(q.counters().get('a'), 0);
  });
});
