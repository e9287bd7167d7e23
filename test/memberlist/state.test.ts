/**
 * The SWIM/Lifeguard state machine on the in-memory MockNetwork with a
 * ManualClock: no sockets, no real waiting.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ManualClock } from '../../src/mesh/memberlist/clock.ts';
import { MockNetwork } from '../../src/mesh/memberlist/mock-transport.ts';
import { Memberlist, MemberlistConfig, Member } from '../../src/mesh/memberlist/memberlist.ts';
import type { Delegate } from '../../src/mesh/memberlist/state.ts';
import { Suspicion, remainingSuspicionTime, suspicionTimeout } from '../../src/mesh/memberlist/suspicion.ts';
import { TransmitLimitedQueue, retransmitLimit } from '../../src/mesh/memberlist/broadcast-queue.ts';
import { Awareness } from '../../src/mesh/memberlist/awareness.ts';

interface Cluster {
  clock: ManualClock;
  net: MockNetwork;
  nodes: Map<string, Memberlist>;
  add(name: string, ip: string, extra?: Partial<MemberlistConfig>, delegate?: Delegate): Promise<Memberlist>;
  shutdown(): Promise<void>;
}

function cluster(): Cluster {
  const clock = new ManualClock();
  const net = new MockNetwork();
  const nodes = new Map<string, Memberlist>();
  return {
    clock,
    net,
    nodes,
    async add(name, ip, extra = {}, delegate = {}) {
      const transport = net.newTransport(ip, 7946);
      const ml = await Memberlist.create(
        { name, bindAddr: ip, port: 7946, label: 'viiwork-v2', keys: [Buffer.alloc(32, 9)], transport, clock, ...extra },
        delegate,
      );
      nodes.set(name, ml);
      return ml;
    },
    async shutdown() {
      await Promise.all([...nodes.values()].map((n) => n.shutdown()));
    },
  };
}

const stateOf = (ml: Memberlist, name: string) => ml.members().find((m) => m.name === name)?.state;

/** Advances virtual time until cond holds; fails after maxMs of virtual time. */
async function until(c: Cluster, cond: () => boolean, maxMs: number, what: string): Promise<number> {
  const start = c.clock.now();
  while (!cond()) {
    if (c.clock.now() - start > maxMs) throw new Error(`not within ${maxMs} virtual ms: ${what}`);
    await c.clock.advance(50);
  }
  return c.clock.now() - start;
}

async function joined(c: Cluster, names: string[], ips: string[]): Promise<Memberlist[]> {
  const out: Memberlist[] = [];
  for (let i = 0; i < names.length; i++) out.push(await c.add(names[i], ips[i]));
  for (let i = 1; i < out.length; i++) {
    const p = out[i].join([`${ips[0]}:7946`]);
    await c.clock.advance(100);
    assert.equal((await p).joined, 1);
  }
  await until(c, () => out.every((m) => m.members().filter((x) => x.state === 'alive').length === names.length), 10_000, 'everyone alive');
  return out;
}

test('probe success: healthy members stay alive and the health score stays 0', async () => {
  const c = cluster();
  try {
    const [a, b] = await joined(c, ['a', 'b'], ['10.0.0.1', '10.0.0.2']);
    const left: string[] = [];
    a.on('leave', (m) => left.push(m.name));
    const sent = c.net.packetsSent;
    await c.clock.advance(10_000);
    assert.ok(c.net.packetsSent - sent >= 10, 'pings and acks flowed');
    assert.equal(stateOf(a, 'b'), 'alive');
    assert.equal(stateOf(b, 'a'), 'alive');
    assert.equal(a.healthScore(), 0);
    assert.deepEqual(left, []);
  } finally {
    await c.shutdown();
  }
});

test('indirect probe success: a member unreachable directly stays alive through a third member', async () => {
  const c = cluster();
  try {
    const [a, b] = await joined(c, ['a', 'b', 'c'], ['10.0.1.1', '10.0.1.2', '10.0.1.3']);
    // a and b cannot talk directly, neither by UDP nor TCP
    c.net.filter = (from, to) => !((from.startsWith('10.0.1.1') && to.startsWith('10.0.1.2')) || (from.startsWith('10.0.1.2') && to.startsWith('10.0.1.1')));
    const seen: string[] = [];
    a.on('leave', (m) => seen.push(m.name));
    await c.clock.advance(20_000);
    assert.notEqual(stateOf(a, 'b'), 'dead');
    assert.notEqual(stateOf(b, 'a'), 'dead');
    assert.deepEqual(seen, []);
  } finally {
    await c.shutdown();
  }
});

test('TCP fallback ping keeps a member alive when only UDP is cut', async () => {
  const c = cluster();
  try {
    const [a] = await joined(c, ['a', 'b'], ['10.0.2.1', '10.0.2.2']);
    c.net.filter = (_f, _t, kind) => kind === 'stream';
    await c.clock.advance(20_000);
    assert.notEqual(stateOf(a, 'b'), 'dead');
  } finally {
    await c.shutdown();
  }
});

test('nack: a helper that answers an indirect probe with a nack spares our health score', async () => {
  // probe timeout 300 ms so the helper's nack (sent 300 ms after its own ping) lands inside our 1 s probe
  const run = async (base: string, dropHelperToA: boolean) => {
    const c = cluster();
    try {
      const logs: { msg: string; f?: Record<string, unknown> }[] = [];
      const a = await c.add('a', `${base}.1`, { probeTimeoutMs: 300, logger: (_l, msg, f) => logs.push({ msg, f }) });
      const h = await c.add('helper', `${base}.2`, { probeTimeoutMs: 300 });
      const x = await c.add('x', `${base}.3`, { probeTimeoutMs: 300 });
      for (const m of [h, x]) {
        const p = m.join([`${base}.1:7946`]);
        await c.clock.advance(100);
        await p;
      }
      await until(c, () => a.numAlive() === 3 && h.numAlive() === 3, 5000, 'all alive');
      await x.shutdown();
      if (dropHelperToA) c.net.filter = (from, to) => !(from.startsWith(`${base}.2:`) && to.startsWith(`${base}.1:`));
      await until(c, () => logs.some((l) => l.msg.startsWith('suspect x has failed')), 10_000, 'a itself failed a probe of x');
      return { a, f: logs.find((l) => l.msg.startsWith('suspect x has failed'))!.f!, health: a.healthScore() };
    } finally {
      await c.shutdown();
    }
  };
  const withNack = await run('10.0.3', false);
  assert.equal(withNack.f.expectedNacks, 1);
  assert.equal(withNack.f.nacks, 1);
  assert.equal(withNack.f.awarenessDelta, 0);
  assert.equal(withNack.health, 0, 'the helper nacked, so the failure is not ours');
  const withoutNack = await run('10.0.4', true);
  assert.equal(withoutNack.f.nacks, 0);
  assert.equal(withoutNack.f.awarenessDelta, 1, 'a missing nack counts against our own health');
  assert.ok(withoutNack.health >= 1);
});

test('suspicion timeout: a silent member goes suspect, then dead after the suspicion timeout', async () => {
  const c = cluster();
  try {
    const [a, b] = await joined(c, ['a', 'b'], ['10.0.5.1', '10.0.5.2']);
    const events: Member[] = [];
    a.on('leave', (m) => events.push(m));
    await b.shutdown();
    await until(c, () => stateOf(a, 'b') === 'suspect', 5000, 'b suspect');
    const suspectAt = c.clock.now();
    await until(c, () => stateOf(a, 'b') === 'dead', 10_000, 'b dead');
    const took = c.clock.now() - suspectAt;
    // n=2: k=0, timeout = 4 * max(1, log10 2) * 1 s = 4 s
    assert.ok(took >= 3900 && took <= 4200, `suspicion took ${took} ms`);
    assert.equal(events.length, 1);
    assert.equal(events[0].state, 'dead');
    // dead members are dropped after gossipToTheDead (30 s)
    await until(c, () => stateOf(a, 'b') === undefined, 40_000, 'b removed');
  } finally {
    await c.shutdown();
  }
});

test('suspicion timer shrinks with independent confirmations (Lifeguard)', async () => {
  const clock = new ManualClock();
  assert.equal(suspicionTimeout(4, 2, 1000), 4000);
  assert.equal(suspicionTimeout(4, 100, 1000), 8000);
  assert.equal(remainingSuspicionTime(0, 3, 0, 2000, 30000), 30000);
  assert.equal(remainingSuspicionTime(3, 3, 0, 2000, 30000), 2000);
  let fired = -1;
  const s = new Suspicion('me', 2, 2000, 12000, clock, (n) => (fired = n));
  await clock.advance(1000);
  assert.ok(s.confirm('c1'));
  assert.ok(!s.confirm('c1'), 'a second confirmation from the same member does not count');
  await clock.advance(2000);
  assert.equal(fired, -1);
  assert.ok(s.confirm('c2'));
  await clock.advance(10);
  assert.equal(fired, 2, 'after k confirmations the timeout is the minimum (already elapsed)');
  assert.ok(!s.confirm('c3'), 'no more than k confirmations');

  let fired2 = false;
  new Suspicion('me', 2, 2000, 12000, clock, () => (fired2 = true));
  await clock.advance(11_900);
  assert.equal(fired2, false);
  await clock.advance(200);
  assert.equal(fired2, true, 'without confirmations it fires at the maximum');
});

test('confirmations from other members shorten suspicion in a 5-member cluster', async () => {
  const c = cluster();
  try {
    const [a, , , , e] = await joined(c, ['a', 'b', 'c', 'd', 'e'], ['10.0.6.1', '10.0.6.2', '10.0.6.3', '10.0.6.4', '10.0.6.5']);
    await e.shutdown();
    await until(c, () => stateOf(a, 'e') !== 'alive', 10_000, 'e suspected at a');
    const t0 = c.clock.now();
    await until(c, () => stateOf(a, 'e') === 'dead', 30_000, 'e dead at a');
    const took = c.clock.now() - t0;
    // n=5: min = 4 * log10(5) s ≈ 2.8 s, max = 6 * min ≈ 16.8 s; others confirm, so well under max
    assert.ok(took < 14_000, `suspicion with confirmations took ${took} ms`);
  } finally {
    await c.shutdown();
  }
});

test('refutation: a member suspected by others refutes with a higher incarnation', async () => {
  const c = cluster();
  try {
    const [a, b] = await joined(c, ['a', 'b'], ['10.0.7.1', '10.0.7.2']);
    const inc = a.localMember().incarnation;
    b.state.suspectNode({ incarnation: inc, node: 'a', from: 'b' });
    assert.equal(stateOf(b, 'a'), 'suspect');
    await until(c, () => stateOf(b, 'a') === 'alive', 3000, 'a refuted at b');
    assert.ok(a.localMember().incarnation > inc, 'incarnation went up');
    assert.equal(b.members().find((m) => m.name === 'a')!.incarnation, a.localMember().incarnation);
    // a dead claim about a live node is refuted too
    b.state.deadNode({ incarnation: a.localMember().incarnation, node: 'a', from: 'b' });
    assert.equal(stateOf(b, 'a'), 'dead');
    await until(c, () => stateOf(b, 'a') === 'alive', 5000, 'a back alive at b');
  } finally {
    await c.shutdown();
  }
});

test('a suspected member that refutes is reported alive again: a view kept from events never keeps a stale suspect', async () => {
  // The healed partition of test/mesh/membership.test.ts: the rejoining
  // member's push-pull says b is dead, so a suspects b (Go's mergeState
  // suspects instead of believing the death); b is alive and refutes. A
  // consumer that snapshots members() on join/update/leave (viiwork's
  // member table) took its last snapshot while b was suspect, and must
  // hear about b being alive again.
  const c = cluster();
  try {
    const [a, b] = await joined(c, ['a', 'b'], ['10.0.15.1', '10.0.15.2']);
    const view = new Map<string, string>();
    const snapshot = () => {
      for (const m of a.members()) view.set(m.name, m.state);
    };
    const updates: string[] = [];
    a.on('join', snapshot);
    a.on('leave', snapshot);
    a.on('update', (m) => {
      updates.push(`${m.name}:${m.state}`);
      snapshot();
    });
    snapshot();
    // a's gossip to b is held back until the rejoin below is done, so b refutes after it
    c.net.filter = (from, to) => !(from.startsWith('10.0.15.1:') && to.startsWith('10.0.15.2:'));
    const inc = b.localMember().incarnation;
    a.state.suspectNode({ incarnation: inc, node: 'b', from: 'a' });
    assert.equal(stateOf(a, 'b'), 'suspect');
    // the rejoining member: a join event, hence a snapshot, while b is suspect
    const x = await c.add('x', '10.0.15.3');
    const p = x.join(['10.0.15.1:7946']);
    await c.clock.advance(100);
    assert.equal((await p).joined, 1);
    assert.equal(view.get('x'), 'alive');
    assert.equal(view.get('b'), 'suspect');
    c.net.filter = () => true;
    await until(c, () => stateOf(a, 'b') === 'alive', 3000, 'b refuted at a');
    assert.ok(b.localMember().incarnation > inc, 'b refuted with a higher incarnation');
    assert.equal(view.get('b'), 'alive', "a's event-driven view shows b alive again");
    assert.deepEqual(updates.filter((u) => u.startsWith('b:')), ['b:suspect', 'b:alive']);
    // and it stays that way, with every member alive in both the view and members()
    await c.clock.advance(10_000);
    for (const m of a.members()) assert.equal(view.get(m.name), m.state, `view of ${m.name}`);
    assert.deepEqual([...view.values()], ['alive', 'alive', 'alive']);
  } finally {
    await c.shutdown();
  }
});

test('a dead member name is reclaimable by a new address only after 30 s', async () => {
  const c = cluster();
  try {
    const [a, b] = await joined(c, ['a', 'b'], ['10.0.8.1', '10.0.8.2']);
    await b.shutdown();
    c.nodes.delete('b');
    await until(c, () => stateOf(a, 'b') === 'dead', 10_000, 'b dead');
    // a new process named b on another address, early
    const logs: string[] = [];
    a.state.cfg.logger = (_l, msg) => logs.push(msg);
    const b2 = await c.add('b', '10.0.8.3', {});
    const p = b2.join(['10.0.8.1:7946']);
    await c.clock.advance(200);
    await p;
    await c.clock.advance(2000);
    assert.equal(a.members().find((m) => m.name === 'b')?.addr, '10.0.8.2', 'not reclaimed before 30 s');
    assert.equal(stateOf(a, 'b'), 'dead');
    assert.ok(logs.some((l) => l.startsWith('conflicting address for b')), 'conflict logged');
    await b2.shutdown();
    c.nodes.delete('b');
    // after 30 s, it can
    await c.clock.advance(30_000);
    const b3 = await c.add('b', '10.0.8.4', { pushPullIntervalMs: 0 });
    const p3 = b3.join(['10.0.8.1:7946']);
    await c.clock.advance(200);
    assert.equal((await p3).joined, 1);
    await until(c, () => stateOf(a, 'b') === 'alive', 5000, 'b alive again');
    assert.equal(a.members().find((m) => m.name === 'b')?.addr, '10.0.8.4');
  } finally {
    await c.shutdown();
  }
});

test('push-pull merges the member lists of two clusters', async () => {
  const c = cluster();
  try {
    const a = await c.add('a', '10.0.9.1');
    const b = await c.add('b', '10.0.9.2');
    const x = await c.add('x', '10.0.9.3');
    const y = await c.add('y', '10.0.9.4');
    let p = b.join(['10.0.9.1:7946']);
    await c.clock.advance(100);
    await p;
    p = y.join(['10.0.9.3:7946']);
    await c.clock.advance(100);
    await p;
    p = a.join(['10.0.9.3:7946']);
    await c.clock.advance(100);
    assert.equal((await p).joined, 1);
    assert.deepEqual(a.members().map((m) => m.name).sort(), ['a', 'b', 'x', 'y']);
    assert.deepEqual(x.members().map((m) => m.name).sort(), ['a', 'b', 'x', 'y']);
    await until(c, () => [a, b, x, y].every((m) => m.numAlive() === 4), 10_000, 'all four everywhere');
  } finally {
    await c.shutdown();
  }
});

test('user state is exchanged in push-pull, with the join flag', async () => {
  const c = cluster();
  try {
    const got: { who: string; buf: string; join: boolean }[] = [];
    const del = (who: string): Delegate => ({
      localState: (join) => Buffer.from(`${who}:${join}`),
      mergeRemoteState: (buf, join) => got.push({ who, buf: buf.toString(), join }),
    });
    await c.add('a', '10.0.10.1', { pushPullIntervalMs: 30_000 }, del('a'));
    const b = await c.add('b', '10.0.10.2', { pushPullIntervalMs: 30_000 }, del('b'));
    const p = b.join(['10.0.10.1:7946']);
    await c.clock.advance(100);
    await p;
    assert.deepEqual(got, [
      { who: 'a', buf: 'b:true', join: true },
      { who: 'b', buf: 'a:true', join: true },
    ]);
    got.length = 0;
    await c.clock.advance(61_000);
    assert.ok(got.some((g) => g.join === false), 'periodic push-pull carries join=false');
  } finally {
    await c.shutdown();
  }
});

test('user broadcasts are gossiped to other members', async () => {
  const c = cluster();
  try {
    const pending = [Buffer.from([0x80, 1, 2])];
    const received: Buffer[] = [];
    await c.add('a', '10.0.11.1', {}, { getBroadcasts: () => pending.splice(0) });
    const b = await c.add('b', '10.0.11.2', {}, { notifyMsg: (m) => received.push(m) });
    const p = b.join(['10.0.11.1:7946']);
    await c.clock.advance(100);
    await p;
    await until(c, () => received.length > 0, 3000, 'user message delivered');
    assert.deepEqual(received[0], Buffer.from([0x80, 1, 2]));
    await b.sendReliable('a', Buffer.from('x'));
  } finally {
    await c.shutdown();
  }
});

test('graceful leave is seen as left; metadata updates are gossiped', async () => {
  const c = cluster();
  try {
    let meta = Buffer.from('{"v":2}');
    const a = await c.add('a', '10.0.12.1');
    const b = await c.add('b', '10.0.12.2', {}, { nodeMeta: () => meta });
    const p = b.join(['10.0.12.1:7946']);
    await c.clock.advance(100);
    await p;
    const updates: Member[] = [];
    a.on('update', (m) => updates.push(m));
    meta = Buffer.from('{"v":2,"x":1}');
    const u = b.updateMeta(3000);
    await c.clock.advance(1000);
    await u;
    await until(c, () => updates.length > 0, 3000, 'meta update at a');
    assert.equal(a.members().find((m) => m.name === 'b')!.meta.toString(), '{"v":2,"x":1}');
    const l = b.leave(3000);
    await c.clock.advance(1000);
    await l;
    await until(c, () => stateOf(a, 'b') === 'left', 3000, 'b left at a');
  } finally {
    await c.shutdown();
  }
});

test('a newcomer with a live member’s name sees a conflict while joining', async () => {
  const c = cluster();
  try {
    await c.add('a', '10.0.13.1');
    const twin = await c.add('a', '10.0.13.2');
    const seen: { m: Member; duringJoin: boolean }[] = [];
    twin.on('conflict', (m, info) => seen.push({ m, duringJoin: info.duringJoin }));
    const p = twin.join(['10.0.13.1:7946']);
    await c.clock.advance(100);
    await p;
    assert.ok(seen.length >= 1);
    assert.equal(seen[0].m.addr, '10.0.13.1');
    assert.equal(seen[0].duringJoin, true);
  } finally {
    await c.shutdown();
  }
});

test('unencrypted or wrong-label traffic is dropped by a secured member', async () => {
  const c = cluster();
  try {
    const logs: string[] = [];
    const a = await c.add('a', '10.0.14.1', { logger: (_l, msg) => logs.push(msg) });
    const open = await c.add('open', '10.0.14.2', { keys: [] });
    const other = await c.add('other', '10.0.14.3', { label: 'other-label' });
    for (const m of [open, other]) {
      const p = m.join(['10.0.14.1:7946']);
      await c.clock.advance(100);
      assert.equal((await p).joined, 0);
    }
    await c.clock.advance(3000);
    assert.deepEqual(a.members().map((m) => m.name), ['a']);
    assert.ok(logs.some((l) => /mode mismatch: plaintext stream from 10\.0\.14\.2/.test(l)), 'the plaintext attempt is logged as such');
    assert.ok(logs.some((l) => /label/.test(l)), 'the wrong label is logged');
  } finally {
    await c.shutdown();
  }
});

test('broadcast queue: retransmit limit, newest first, invalidation by node name', () => {
  assert.equal(retransmitLimit(4, 1), 4);
  assert.equal(retransmitLimit(4, 10), 8);
  const q = new TransmitLimitedQueue(4, () => 1);
  let finished = 0;
  q.queueBroadcast({ name: 'x', msg: Buffer.from('old'), finished: () => finished++ });
  q.queueBroadcast({ name: 'x', msg: Buffer.from('new') });
  assert.equal(finished, 1);
  q.queueBroadcast({ name: 'y', msg: Buffer.from('yy') });
  assert.deepEqual(q.getBroadcasts(2, 100).map(String), ['yy', 'new']);
  assert.deepEqual(q.getBroadcasts(2, 5).map(String), ['yy']);
  for (let i = 0; i < 4; i++) q.getBroadcasts(2, 100);
  assert.equal(q.numQueued(), 0);
  const aw = new Awareness(8);
  aw.applyDelta(20);
  assert.equal(aw.getHealthScore(), 7);
  assert.equal(aw.scaleTimeout(500), 4000);
  aw.applyDelta(-100);
  assert.equal(aw.getHealthScore(), 0);
});
