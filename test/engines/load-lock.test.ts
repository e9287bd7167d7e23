import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { LoadLock } from '../../src/engines/load-lock.ts';

describe('LoadLock', () => {
  test('grants one holder at a time, in arrival order', async () => {
    const lock = new LoadLock();
    const order: string[] = [];
    const r1 = await lock.acquire('a');
    const p2 = lock.acquire('b').then((r) => (order.push('b'), r));
    const p3 = lock.acquire('c').then((r) => (order.push('c'), r));
    assert.equal(lock.holder, 'a');
    assert.equal(lock.waiting, 2);
    r1();
    r1(); // a second release is harmless
    const r2 = await p2;
    assert.equal(lock.holder, 'b');
    assert.deepEqual(order, ['b']);
    r2();
    (await p3)();
    assert.deepEqual(order, ['b', 'c']);
    assert.equal(lock.held, false);
  });

  test('a waiter that aborts leaves the line', async () => {
    const lock = new LoadLock();
    const r1 = await lock.acquire('a');
    const ac = new AbortController();
    const p = lock.acquire('b', ac.signal);
    ac.abort(new Error('stopped'));
    await assert.rejects(p, /stopped/);
    assert.equal(lock.waiting, 0);
    r1();
    assert.equal(lock.held, false);
    await assert.rejects(lock.acquire('c', ac.signal), /stopped/);
  });
});
