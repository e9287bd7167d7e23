/**
 * Real UDP/TCP sockets: three members on 127.0.1.1-3, all on port 7946.
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Memberlist } from '../../src/mesh/memberlist/memberlist.ts';
import { waitFor } from './helpers.ts';

const made: Memberlist[] = [];
after(async () => {
  await Promise.all(made.map((m) => m.shutdown()));
});

const fast = { probeIntervalMs: 500, probeTimeoutMs: 250, gossipIntervalMs: 100, pushPullIntervalMs: 5000 };

async function make(name: string, ip: string, keys: Buffer[], label = 'viiwork-v2'): Promise<Memberlist> {
  const ml = await Memberlist.create({ name, bindAddr: ip, port: 7946, label, keys, ...fast });
  made.push(ml);
  return ml;
}

const aliveNames = (m: Memberlist) =>
  m
    .members()
    .filter((x) => x.state === 'alive')
    .map((x) => x.name)
    .sort();

test('three members with a shared key see each other alive; a fourth with another key never joins', async () => {
  const key = randomBytes(32);
  const a = await make('sock-a', '127.0.1.1', [key]);
  const b = await make('sock-b', '127.0.1.2', [key]);
  const c = await make('sock-c', '127.0.1.3', [key]);
  assert.deepEqual((await b.join(['127.0.1.1:7946'])).joined, 1);
  assert.deepEqual((await c.join(['127.0.1.2:7946'])).joined, 1);
  await waitFor(() => [a, b, c].every((m) => aliveNames(m).join() === 'sock-a,sock-b,sock-c'), 10_000, 'all three alive everywhere');
  assert.deepEqual(a.localMember().vsn, [1, 5, 2, 2, 5, 5]);
  const m = b.members().find((x) => x.name === 'sock-a')!;
  assert.equal(m.addr, '127.0.1.1');
  assert.equal(m.port, 7946);

  const d = await make('sock-d', '127.0.1.4', [randomBytes(32)]);
  const r = await d.join(['127.0.1.1:7946']);
  assert.equal(r.joined, 0);
  assert.equal(r.errors.length, 1);
  await new Promise((res) => setTimeout(res, 1500));
  assert.deepEqual(aliveNames(d), ['sock-d']);
  for (const x of [a, b, c]) assert.ok(!aliveNames(x).includes('sock-d'));
  await d.shutdown();

  // a member that leaves is shown as left by the others
  await c.leave(3000);
  await c.shutdown();
  await waitFor(() => a.members().find((x) => x.name === 'sock-c')?.state === 'left', 5000, 'sock-c left at sock-a');
  // a member that just stops is detected dead
  await b.shutdown();
  await waitFor(() => a.members().find((x) => x.name === 'sock-b')?.state === 'dead', 15_000, 'sock-b dead at sock-a');
});
