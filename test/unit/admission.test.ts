/**
 * Fairness across entry nodes (SPEC section 12; docs/decisions.md "Fairness
 * across entry nodes"): the executor's rule for who gets its slots
 * (queue/admission.ts) as tables, the gate and line that apply it
 * (queue/gate.ts) over a fake slot pool, and the two claims that carry a
 * forward's band and wait (queue/forward-claims.ts).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { lineVerdict, mayTake, outranks } from '../../src/queue/admission.ts';
import type { Band, Flow } from '../../src/queue/fair.ts';
import { bandClaim, bandOfClaim, waitClaim, waitOfClaim } from '../../src/queue/forward-claims.ts';
import { SlotGate } from '../../src/queue/gate.ts';
import { waitFor } from '../fakes/wait.ts';

const c = (key: string, band: Band = 'interactive') => ({ key, band });
const counters = (o: Record<string, number>) => new Map(Object.entries(o));

describe('outranks and mayTake', () => {
  const table: [string, ReturnType<typeof c>, ReturnType<typeof c>, Record<string, number>, boolean][] = [
    ['interactive before batch, whatever the counters', c('i'), c('b', 'batch'), { i: 1e9, b: 0 }, true],
    ['batch never before interactive', c('b', 'batch'), c('i'), { i: 1e9, b: 0 }, false],
    ['same band: less service first', c('light'), c('heavy'), { light: 10, heavy: 50 }, true],
    ['same band and service: not before (the waiter keeps its turn)', c('x'), c('y'), { x: 5, y: 5 }, false],
    ['unknown keys count 0', c('new'), c('old'), { old: 1 }, true],
  ];
  for (const [name, a, b, cs, want] of table) it(name, () => assert.equal(outranks(a, b, counters(cs)), want));

  it('a request takes a free slot unless a waiter for the same work comes strictly before it', () => {
    assert.equal(mayTake(c('b', 'batch'), [], counters({})), true);
    assert.equal(mayTake(c('b', 'batch'), [c('i')], counters({})), false);
    assert.equal(mayTake(c('i'), [c('b', 'batch'), c('b', 'batch')], counters({})), true);
    assert.equal(mayTake(c('a'), [c('b'), c('x')], counters({ a: 1, b: 2, x: 0 })), false);
    assert.equal(mayTake(c('a'), [c('a'), c('b')], counters({ a: 1, b: 1 })), true, 'a tie goes to the request asking here');
  });
});

describe('lineVerdict', () => {
  const table: [string, ReturnType<typeof c>[], ReturnType<typeof c>, number, Record<string, number>, ReturnType<typeof lineVerdict>][] = [
    ['room: join', [c('a')], c('b'), 2, {}, { kind: 'join' }],
    ['full of equals: refused', [c('a'), c('a')], c('a'), 2, {}, { kind: 'full' }],
    ['full, an interactive one takes the place of the latest batch waiter', [c('b', 'batch'), c('i'), c('b', 'batch')], c('j'), 3, {}, { kind: 'displace', index: 2 }],
    ['full, the most served key gives way to a less served one', [c('heavy'), c('light')], c('new'), 2, { heavy: 90, light: 10, new: 0 }, { kind: 'displace', index: 0 }],
    ['full, a batch one displaces nobody interactive', [c('i'), c('i')], c('b', 'batch'), 2, {}, { kind: 'full' }],
  ];
  for (const [name, line, flow, max, cs, want] of table) it(name, () => assert.deepEqual(lineVerdict(line, flow, max, counters(cs)), want));
});

describe('band and wait claims', () => {
  it('the band claim only says batch, and a receiver reads only the two bands', () => {
    assert.equal(bandClaim('batch'), 'batch');
    assert.equal(bandClaim('interactive'), undefined);
    assert.equal(bandClaim(undefined), undefined);
    assert.equal(bandOfClaim('batch'), 'batch');
    assert.equal(bandOfClaim('interactive'), 'interactive');
    assert.equal(bandOfClaim('urgent'), undefined);
    assert.equal(bandOfClaim(undefined), undefined);
  });
  it('the wait claim is whole ms, capped by the receiver; malformed or absent means no wait', () => {
    assert.equal(waitClaim(1499.7), '1499');
    assert.equal(waitClaim(0.5), undefined);
    assert.equal(waitOfClaim('1500', 2000), 1500);
    assert.equal(waitOfClaim('90000', 2000), 2000);
    assert.equal(waitOfClaim('1500', 0), 0);
    assert.equal(waitOfClaim('-5', 2000), 0);
    assert.equal(waitOfClaim('1e3', 2000), 0);
    assert.equal(waitOfClaim(undefined, 2000), 0);
  });
});

/** A pool of `n` slots of one model; a lease is its key, released by hand. */
function pool(n: number, lineMax = 3) {
  let free = n;
  const gate = new SlotGate<string, string>({
    lease: (_m, _w, key) => {
      if (free === 0) return undefined;
      free--;
      return key ?? 'anon';
    },
    lineMax,
  });
  return {
    gate,
    /** A slot frees and the line is served (the node's release listeners). */
    release() {
      free++;
      gate.pump();
    },
    /** A slot frees, seen by this node's own queue before the line is served. */
    freeOnly() {
      free++;
    },
  };
}

const flow = (key: string, band: Band = 'interactive', weight = 1, cost = 100): Flow => ({ key, band, weight, cost });

describe('SlotGate', () => {
  it('with nobody waiting a lease goes straight through, flow or not', () => {
    const p = pool(2);
    assert.equal(p.gate.tryLease('m', 'chat', 'a'), 'a');
    assert.equal(p.gate.tryLease('m', 'chat', 'b', flow('b', 'batch')), 'b');
    assert.equal(p.gate.tryLease('m', 'chat', 'c', flow('c')), undefined);
    assert.equal(p.gate.depth('m'), 0);
  });

  it('a freed slot goes to the waiting interactive forward, not to a batch request asking here', async () => {
    const p = pool(1);
    p.gate.tryLease('m', 'chat', 'busy');
    const waiting = p.gate.wait('m', 'chat', 'inter', flow('inter'), 5000);
    assert.equal(p.gate.depth('m'), 1);
    // The slot frees; this node's own queue asks first, for a batch request: held back, and the line is served.
    p.freeOnly();
    assert.equal(p.gate.tryLease('m', 'chat', 'local-batch', flow('local-batch', 'batch')), undefined);
    p.gate.pump();
    const o = await waiting;
    assert.deepEqual(o.ok && o.lease, 'inter');
    assert.equal(p.gate.depth('m'), 0);
  });

  it('an interactive request asking here comes before batch forwards waiting', async () => {
    const p = pool(1);
    p.gate.tryLease('m', 'chat', 'busy');
    const gone = new AbortController();
    const waiting = p.gate.wait('m', 'chat', 'fwd', flow('fwd', 'batch'), 60_000, gone.signal);
    p.freeOnly();
    assert.equal(p.gate.tryLease('m', 'chat', 'here', flow('here')), 'here');
    // Work of another workload is not held back by this line's waiters.
    p.freeOnly();
    assert.equal(p.gate.tryLease('m', 'embeddings', 'emb', flow('emb', 'batch')), 'emb');
    gone.abort();
    const o = await waiting;
    assert.equal(!o.ok && o.reason, 'aborted');
    assert.equal(p.gate.depth('m'), 0);
  });

  it('inside a band, the line serves keys by weighted service: weight 3 gets three of four slots', async () => {
    const p = pool(1, 8);
    p.gate.tryLease('m', 'chat', 'busy');
    const served: string[] = [];
    const gone = new AbortController();
    // Both keys keep two forwards waiting; each grant is released on the next turn and its key sends another.
    const keep = (key: string, weight: number) => {
      const one = (): void => {
        void p.gate.wait('m', 'chat', key, flow(key, 'interactive', weight), 60_000, gone.signal).then((o) => {
          if (!o.ok) return;
          served.push(key);
          one();
          if (served.length < 400) setImmediate(() => p.release());
        });
      };
      one();
      one();
    };
    keep('w1', 1);
    keep('w3', 3);
    p.release();
    await waitFor(() => served.length >= 400, { timeoutMs: 20_000, what: '400 grants' });
    gone.abort();
    const w3 = served.filter((k) => k === 'w3').length / served.length;
    assert.ok(Math.abs(w3 - 0.75) < 0.03, `weight-3 share ${w3}`);
  });

  it('a line of one: the waiter that takes the only place is still served', async () => {
    const p = pool(1, 1);
    p.gate.tryLease('m', 'chat', 'busy');
    const gone = new AbortController();
    const batch = p.gate.wait('m', 'chat', 'b', flow('b', 'batch'), 60_000, gone.signal);
    const inter = p.gate.wait('m', 'chat', 'i', flow('i'), 60_000, gone.signal);
    assert.equal((await batch).ok, false);
    assert.equal(p.gate.depth('m'), 1);
    p.release();
    const o = await inter;
    assert.equal(o.ok && o.lease, 'i');
  });

  it('a wait runs out at its bound, and a full line refuses or displaces', async () => {
    const p = pool(1);
    p.gate.tryLease('m', 'chat', 'busy');
    const short = await p.gate.wait('m', 'chat', 's', flow('s'), 1);
    assert.equal(!short.ok && short.reason, 'timeout');
    const gone = new AbortController();
    const batch = [1, 2, 3].map((i) => p.gate.wait('m', 'chat', `b${i}`, flow(`b${i}`, 'batch'), 60_000, gone.signal));
    const more = await p.gate.wait('m', 'chat', 'b4', flow('b4', 'batch'), 60_000, gone.signal);
    assert.equal(!more.ok && more.reason, 'full');
    const inter = p.gate.wait('m', 'chat', 'i', flow('i'), 60_000, gone.signal);
    const third = await batch[2];
    assert.equal(!third.ok && third.reason, 'displaced');
    p.release();
    const o = await inter;
    assert.equal(o.ok && o.lease, 'i');
    gone.abort();
    await Promise.all(batch);
    assert.equal(p.gate.depth('m'), 0);
  });
});
