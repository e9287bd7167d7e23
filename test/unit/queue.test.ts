import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { QueueSet, WaitQueue } from '../../src/queue/fifo.ts';

describe('wait queue', () => {
  it('places waiters in FIFO order as room appears', async () => {
    const q = new WaitQueue<number>(10, 60_000);
    let free = 0;
    const order: number[] = [];
    const take = (id: number) => () => (free > 0 ? (free--, id) : undefined);
    const all = [1, 2, 3].map((id) => q.enqueue(take(id)).then((o) => (o.ok ? order.push(o.value) : undefined)));
    assert.equal(q.depth, 3);
    free = 2;
    q.pump();
    free = 1;
    q.pump();
    await Promise.all(all);
    assert.deepEqual(order, [1, 2, 3]);
  });

  it('tries a waiter again at the time its attempt asked for, with nothing else pumping (a wait for a warm host ends)', async () => {
    const q = new WaitQueue<string>(10, 60_000);
    const t0 = Date.now();
    let tries = 0;
    const out = await q.enqueue((wake) => {
      tries++;
      if (Date.now() - t0 < 60) {
        wake(t0 + 60);
        return undefined;
      }
      return 'placed';
    });
    assert.ok(out.ok && out.value === 'placed');
    assert.ok(Date.now() - t0 >= 60);
    assert.ok(tries >= 2 && tries <= 3, `${tries} tries`);
  });

  it('refuses at once when full', async () => {
    const q = new WaitQueue<number>(1, 60_000);
    const ac = new AbortController();
    const first = q.enqueue(() => undefined, { signal: ac.signal });
    const second = await q.enqueue(() => undefined);
    assert.deepEqual(second, { ok: false, reason: 'full', queuedMs: 0 });
    assert.equal(q.depth, 1);
    ac.abort();
    await first;
  });

  it('times out at the deadline', async () => {
    const q = new WaitQueue<number>(5, 30);
    const out = await q.enqueue(() => undefined);
    assert.equal(out.ok, false);
    assert.equal(!out.ok && out.reason, 'timeout');
    assert.equal(q.depth, 0);
  });

  it('a waiter that cannot be placed does not block the ones behind it', async () => {
    const q = new WaitQueue<string>(5, 60_000);
    const ac = new AbortController();
    const pinned = q.enqueue(() => undefined, { signal: ac.signal });
    const free = q.enqueue(() => 'ran');
    const out = await free;
    assert.deepEqual(out.ok && out.value, 'ran');
    assert.equal(q.depth, 1);
    ac.abort();
    await pinned;
  });

  it('puts a returning waiter at the head', async () => {
    const q = new WaitQueue<string>(5, 60_000);
    let open = false;
    const order: string[] = [];
    const a = q.enqueue(() => (open ? 'a' : undefined)).then((o) => o.ok && order.push(o.value));
    const b = q.enqueue(() => (open ? 'b' : undefined), { front: true }).then((o) => o.ok && order.push(o.value));
    open = true;
    q.pump();
    await Promise.all([a, b]);
    assert.deepEqual(order, ['b', 'a']);
  });

  it('leaves the queue when the client aborts', async () => {
    const q = new WaitQueue<string>(5, 60_000);
    const ac = new AbortController();
    const p = q.enqueue(() => undefined, { signal: ac.signal });
    ac.abort();
    const out = await p;
    assert.equal(!out.ok && out.reason, 'aborted');
    assert.equal(q.depth, 0);
  });

  it('keeps one queue per (model, workload)', async () => {
    const qs = new QueueSet<number>(3, 60_000);
    const ac = new AbortController();
    const waiting = [
      qs.get('m', 'chat').enqueue(() => undefined, { signal: ac.signal }),
      qs.get('m', 'embeddings').enqueue(() => undefined, { signal: ac.signal }),
      qs.get('m', 'embeddings').enqueue(() => undefined, { signal: ac.signal }),
    ];
    assert.equal(qs.depth('m'), 3);
    assert.equal(qs.depth('m', 'embeddings'), 2);
    assert.notEqual(qs.get('m', 'chat'), qs.get('m', 'embeddings'));
    ac.abort();
    await Promise.all(waiting);
  });
});

describe('sustained queueing (SPEC 11, scale_after)', () => {
  it('counts from when the queue last filled, across waiters that come and go, and not for a request placed at once', async () => {
    let now = 1000;
    const q = new WaitQueue<string>(10, 60_000, () => now);
    let free = 0;
    const take = () => (free > 0 ? (free--, 'slot') : undefined);
    assert.equal(q.queuedSince, undefined);
    free = 1;
    assert.deepEqual(await q.enqueue(take), { ok: true, value: 'slot', queuedMs: 0 });
    assert.equal(q.queuedSince, undefined, 'placed at once: it did not queue');
    const a = q.enqueue(take);
    now = 1200;
    const b = q.enqueue(take);
    assert.equal(q.queuedSince, 1000);
    // The oldest is placed, another arrives: the queue never drained, so queueing is still counted from 1000.
    now = 1500;
    free = 1;
    q.pump();
    assert.equal((await a).ok, true);
    const c = q.enqueue(take);
    assert.equal(q.queuedSince, 1000);
    now = 1800;
    free = 2;
    q.pump();
    await Promise.all([b, c]);
    assert.equal(q.queuedSince, undefined, 'drained');
    now = 2000;
    const d = q.enqueue(take);
    assert.equal(q.queuedSince, 2000);
    free = 1;
    q.pump();
    await d;
  });
});
