/**
 * MemberlistThread (src/mesh/thread/): memberlist on a worker thread, seen
 * from the node through messages. Real threads and real sockets on
 * 127.0.44.x; one engine inline (same messages, no thread) where noted.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, describe, it } from 'node:test';
import { waitFor } from '../fakes/wait.ts';
import type { Member } from '../../src/mesh/memberlist/memberlist.ts';
import { MemberlistThread, type MemberlistThreadOptions } from '../../src/mesh/thread/memberlist-thread.ts';

const started: MemberlistThread[] = [];
after(() => Promise.all(started.map((t) => t.shutdown())));

interface Logged {
  level: string;
  msg: string;
  fields?: Record<string, unknown>;
}

type Extra = Partial<Omit<MemberlistThreadOptions, 'config'>> & { config?: Partial<MemberlistThreadOptions['config']> };

async function start(name: string, ip: string, extra: Extra = {}) {
  const logs: Logged[] = [];
  const user: string[] = [];
  const remote: { state: string; join: boolean }[] = [];
  let meta = `meta-${name}`;
  const t = await MemberlistThread.start({
    nodeMeta: () => Buffer.from(meta),
    localState: Buffer.from(`state-${name}`),
    logger: (level, msg, fields) => logs.push({ level, msg, fields }),
    notifyMsg: (buf) => user.push(buf.toString()),
    mergeRemoteState: (buf, join) => remote.push({ state: buf.toString(), join }),
    ...extra,
    config: { name, bindAddr: ip, port: 7946, label: 'test', pushPullIntervalMs: 0, ...extra.config },
  });
  started.push(t);
  return { t, logs, user, remote, setMeta: (m: string) => (meta = m) };
}

const view = (t: MemberlistThread) => Object.fromEntries(t.members().map((m) => [m.name, m.state]));

describe('MemberlistThread', () => {
  it('mirrors the member list, updated before each event, with the engine on a thread or inline', async () => {
    const a = await start('a', '127.0.44.1');
    const b = await start('b', '127.0.44.2', { inline: true });
    assert.deepEqual(view(a.t), { a: 'alive' });
    assert.equal(a.t.localMember().addr, '127.0.44.1');
    assert.equal(a.t.localMember().port, 7946);
    assert.equal(a.t.localMember().meta.toString(), 'meta-a');
    const seenInListener: Record<string, string>[] = [];
    a.t.on('join', (m: Member) => {
      if (m.name === 'b') seenInListener.push(view(a.t));
    });
    const r = await b.t.join(['127.0.44.1:7946']);
    assert.deepEqual(r, { joined: 1, errors: [] });
    await waitFor(() => a.t.numAlive() === 2 && b.t.numAlive() === 2, { timeoutMs: 10_000, what: 'both see two alive' });
    assert.deepEqual(seenInListener, [{ a: 'alive', b: 'alive' }]);
    assert.deepEqual(view(b.t), { a: 'alive', b: 'alive' });
    assert.equal(b.t.members().find((m) => m.name === 'a')?.meta.toString(), 'meta-a');
    await b.t.leave(2000);
    await b.t.shutdown();
    await waitFor(() => view(a.t).b === 'left', { timeoutMs: 10_000, what: 'a sees b left' });
  });

  it('answers push-pulls with the state it was last given, gossips broadcasts, and sends new metadata on updateMeta', async () => {
    const a = await start('pa', '127.0.44.11');
    const b = await start('pb', '127.0.44.12');
    a.t.setLocalState(Buffer.from('state-pa-2'));
    assert.equal((await b.t.join(['127.0.44.11:7946'])).joined, 1);
    assert.deepEqual(b.remote, [{ state: 'state-pa-2', join: true }]);
    // a merged b's state on its own thread; the message saying so may still be on its way.
    await waitFor(() => a.remote.length > 0, { timeoutMs: 10_000, what: "a's merge of b's state" });
    assert.deepEqual(a.remote, [{ state: 'state-pb', join: true }]);

    a.t.queueBroadcast('greeting', Buffer.from('hello'));
    await waitFor(() => b.user.includes('hello'), { timeoutMs: 10_000, what: 'the broadcast reaches pb' });

    const updated = new Promise<Member>((resolve) => b.t.on('update', (m) => m.name === 'pa' && resolve(m)));
    a.setMeta('meta-pa-2');
    await a.t.updateMeta(2000);
    assert.equal((await updated).meta.toString(), 'meta-pa-2');
    assert.equal(a.t.localMember().meta.toString(), 'meta-pa-2');
  });

  it('forgets a departed member once memberlist does, though no event says so', async () => {
    const a = await start('fa', '127.0.44.21', { config: { gossipToTheDeadMs: 500, probeIntervalMs: 200 } });
    const b = await start('fb', '127.0.44.22');
    assert.equal((await b.t.join(['127.0.44.21:7946'])).joined, 1);
    await waitFor(() => view(a.t).fb === 'alive', { timeoutMs: 10_000, what: 'fa sees fb' });
    // The mirror is updated before each event, so the leave event shows the state fb left in: read there, not by
    // polling the mirror, where 'left' lasts only until memberlist forgets fb (gossipToTheDeadMs) and a loaded
    // machine can poll past it.
    let leftAs: string | undefined;
    a.t.on('leave', (m: Member) => {
      if (m.name === 'fb') leftAs = view(a.t).fb;
    });
    await b.t.leave(2000);
    await b.t.shutdown();
    await waitFor(() => leftAs !== undefined, { timeoutMs: 10_000, what: 'fa sees fb leave' });
    assert.equal(leftAs, 'left');
    await waitFor(() => !('fb' in view(a.t)), { timeoutMs: 10_000, what: 'fb gone from the mirror' });
    assert.equal(a.t.numAlive(), 1);
  });

  it('sends only the log levels asked for, naming the peer in a mismatch warning', async () => {
    await start('la', '127.0.44.31');
    const c = await start('lc', '127.0.44.32', { logLevels: ['warn', 'error'], config: { label: 'another' } });
    assert.equal((await c.t.join(['127.0.44.31:7946'])).joined, 0);
    // the warning was sent before the join's answer
    const warn = c.logs.find((l) => l.level === 'warn' && l.fields?.kind === 'label');
    assert.ok(warn, JSON.stringify(c.logs));
    assert.match(warn.msg, /127\.0\.44\.31:7946 closed the stream without answering/);
    assert.equal(warn.fields?.from, '127.0.44.31:7946');
    assert.deepEqual(
      c.logs.filter((l) => l.level !== 'warn' && l.level !== 'error'),
      [],
    );
  });

  it('rejects a start that cannot bind with memberlist’s own error and code, and leaves no thread behind', async () => {
    await start('ba', '127.0.44.41');
    const threads = () => fs.readdirSync('/proc/self/task').length;
    const before = threads();
    await assert.rejects(start('bb', '127.0.44.41'), (e: NodeJS.ErrnoException) => {
      assert.equal(e.code, 'EADDRINUSE');
      assert.match(e.message, /127\.0\.44\.41:7946/);
      return true;
    });
    await waitFor(() => threads() <= before, { what: `the worker's threads gone (${threads()} threads, ${before} before)` });
  });

  it('after shutdown, a call fails at once instead of waiting for a thread that is gone', async () => {
    const a = await start('sa', '127.0.44.51');
    await a.t.shutdown();
    await assert.rejects(a.t.join(['127.0.44.52:7946']), /shut down/);
    await a.t.shutdown(); // twice is fine
  });
});
