/**
 * Issue 12, items 2 and 4: what we store and relay is validated. A short
 * Vsn, an empty or unroutable address, a bad port or name: the entry is
 * dropped, never relayed (a Go 0.2.2 peer panics on a short Vsn), never
 * part of our version checks, and never makes us probe our own localhost.
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import dgram from 'node:dgram';
import net from 'node:net';
import { Memberlist } from '../../src/mesh/memberlist/memberlist.ts';
import { Alive, NodeStateType, encodeAlive, encodePushPull, PushNodeState } from '../../src/mesh/memberlist/codec/messages.ts';
import { addressPolicy, entryProblem, pushEntryProblem, MAX_NODE_NAME_BYTES } from '../../src/mesh/memberlist/codec/validate.ts';
import { encodePacket, encodeStream } from '../../src/mesh/memberlist/codec/wire.ts';
import { labelHeader } from '../../src/mesh/memberlist/codec/label.ts';
import { waitFor } from './helpers.ts';
import { rawTcp, rawUdp, sendUdp } from './hostile.ts';

const LABEL = 'viiwork-v2';
const ip = (s: string) => Buffer.from(s.split('.').map(Number));
const VSN = [1, 5, 2, 2, 5, 5];
const good: Alive = { incarnation: 1, node: 'n', addr: ip('10.1.2.3'), port: 7946, meta: null, vsn: VSN };
const lan = addressPolicy('10.1.2.4');
const lo = addressPolicy('127.0.16.1');

test('entry validation: each malformed field is named, a sound entry passes', () => {
  assert.equal(entryProblem(good, lan, false), null);
  const cases: [Partial<Alive>, RegExp, boolean?][] = [
    [{ vsn: [1, 5, 2] }, /Vsn of 3 bytes/],
    [{ vsn: [1, 5, 2, 2, 5] }, /Vsn of 5 bytes/],
    [{ vsn: [1, 5, 2, 2, 5, 5, 0] }, /Vsn of 7 bytes/],
    [{ vsn: [] }, /no protocol versions/],
    [{ addr: Buffer.alloc(0) }, /empty address/],
    [{ addr: Buffer.from([1, 2, 3, 4, 5]) }, /address of 5 bytes/],
    [{ addr: ip('0.0.0.0') }, /unspecified/],
    [{ addr: ip('224.0.0.251') }, /multicast/],
    [{ addr: ip('255.255.255.255') }, /broadcast/],
    [{ addr: ip('127.0.0.1') }, /loopback/],
    [{ addr: Buffer.concat([Buffer.alloc(15), Buffer.from([1])]) }, /IPv6 address on an IPv4 mesh/],
    [{ port: 70000 }, /port 70000/],
    [{ node: '' }, /empty node name/],
    [{ node: 'x'.repeat(MAX_NODE_NAME_BYTES + 1) }, /longer than 255/],
    [{ meta: Buffer.alloc(513) }, /metadata of 513 bytes/],
    [{ incarnation: 2 ** 32 }, /not a uint32/],
  ];
  for (const [patch, want] of cases) assert.match(entryProblem({ ...good, ...patch }, lan, false) ?? 'accepted', want, JSON.stringify(patch));
  // absent versions are fine for a node we know (its versions stay)
  assert.equal(entryProblem({ ...good, vsn: [] }, lan, true), null);
  // loopback peers are fine for a node that is itself on loopback; IPv4-mapped IPv6 counts as IPv4
  assert.equal(entryProblem({ ...good, addr: ip('127.0.16.2') }, lo, false), null);
  const mapped = Buffer.concat([Buffer.alloc(10), Buffer.from([0xff, 0xff]), ip('10.9.9.9')]);
  assert.equal(entryProblem({ ...good, addr: mapped }, lan, false), null);
  assert.match(pushEntryProblem({ ...good, state: 7 }, lan, false) ?? '', /unknown node state 7/);
  // with our own versions given: inconsistent or incompatible versions are refused
  assert.equal(entryProblem(good, lan, false, VSN), null);
  assert.match(entryProblem({ ...good, vsn: [3, 5, 3, 2, 5, 5] }, lan, false, VSN) ?? '', /incompatible with ours/);
  assert.match(entryProblem({ ...good, vsn: [1, 5, 2, 0, 0, 0] }, lan, false, VSN) ?? '', /incompatible with ours/);
  assert.match(entryProblem({ ...good, vsn: [1, 5, 7, 2, 5, 5] }, lan, false, VSN) ?? '', /inconsistent versions/);
  assert.equal(pushEntryProblem({ ...good, state: NodeStateType.left }, lan, false), null);
});

const made: Memberlist[] = [];
const sockets: { close(): void }[] = [];
after(async () => {
  for (const s of sockets) {
    try {
      s.close();
    } catch {
      /* already closed */
    }
  }
  await Promise.all(made.map((m) => m.shutdown()));
});

/** A UDP socket bound to ip:port, closed after the tests. */
async function bindUdp(ip: string, port: number): Promise<dgram.Socket> {
  const s = dgram.createSocket('udp4');
  sockets.push(s);
  await new Promise<void>((resolve, reject) => {
    s.once('error', reject);
    s.bind(port, ip, () => resolve());
  });
  return s;
}

const fast = { probeIntervalMs: 200, probeTimeoutMs: 100, gossipIntervalMs: 50, pushPullIntervalMs: 0, label: LABEL, port: 7946 };
const logs: string[] = [];
async function make(name: string, bindAddr: string): Promise<Memberlist> {
  const ml = await Memberlist.create({ name, bindAddr, ...fast, logger: (level, msg, f) => logs.push(`${name} ${level} ${msg} ${JSON.stringify(f ?? {})}`) });
  made.push(ml);
  return ml;
}

test('malformed alives are dropped, never relayed, never poison version checks, never make us probe localhost', { timeout: 30_000 }, async () => {
  const t = await make('val-t', '127.0.16.1');
  const p = await make('val-p', '127.0.16.2');
  assert.equal((await p.join(['127.0.16.1:7946'])).joined, 1);
  await waitFor(() => t.members().some((m) => m.name === 'val-p' && m.state === 'alive'), 5000, 't lists p');

  // Traps: whatever reaches 127.0.0.1:<port> (our localhost) or the control address.
  const trapPort = 47946;
  let localhostHits = 0;
  const trapUdp = await bindUdp('127.0.0.1', trapPort);
  trapUdp.on('message', () => localhostHits++);
  const trapTcp = net.createServer((s) => {
    localhostHits++;
    s.destroy();
  });
  sockets.push({ close: () => trapTcp.close() });
  await new Promise<void>((resolve, reject) => {
    trapTcp.once('error', reject);
    trapTcp.listen(trapPort, '127.0.0.1', () => resolve());
  });
  let controlPings = 0;
  const control = await bindUdp('127.0.16.5', trapPort);
  control.on('message', (_m, rinfo) => rinfo.address === '127.0.16.1' && controlPings++);

  const attacker = await rawUdp('127.0.16.9');
  sockets.push(attacker);
  const send = (a: Alive) => sendUdp(attacker, encodePacket(encodeAlive(a), { compress: false, crc: false, label: LABEL, keyring: null }), '127.0.16.1', 7946);
  const base = { incarnation: 1, meta: null, vsn: VSN, port: trapPort };
  await send({ ...base, node: 'bad-short-vsn', addr: ip('127.0.16.6'), vsn: [1, 5, 2] });
  await send({ ...base, node: 'bad-empty-addr', addr: Buffer.alloc(0) });
  await send({ ...base, node: 'bad-zero-addr', addr: ip('0.0.0.0') });
  await send({ ...base, node: 'bad-port', addr: ip('127.0.16.7'), port: 70000 });
  await send({ ...base, node: 'control', addr: ip('127.0.16.5') });

  // The control entry is stored, probed and relayed. t probes round-robin, one
  // round over every node it knows: three pings of the control node from t
  // span two full rounds, in which any stored bad entry would have been probed.
  await waitFor(() => controlPings >= 3, 10_000, 't probes the control node three times');
  await waitFor(() => p.members().some((m) => m.name === 'control'), 10_000, 'p hears of the control node through t');
  for (const m of [t, p]) assert.deepEqual(m.members().map((x) => x.name).filter((n) => n.startsWith('bad-')), []);
  assert.equal(localhostHits, 0, 'nothing was sent to our own localhost');
  assert.equal(t.stats().entriesRefused, 4);
  const warn = logs.filter((l) => l.startsWith('val-t warn refused alive message'));
  assert.equal(warn.length, 1, 'one rate-limited warning for the sender');
  assert.match(warn[0], /"bad-short-vsn" from 127\.0\.16\.9:\d+: Vsn of 3 bytes/);
  assert.match(warn[0], /"kind":"malformed"/);

  // and a newcomer still joins through t: our version checks were not poisoned
  const n = await make('val-n', '127.0.16.3');
  const r = await n.join(['127.0.16.1:7946']);
  assert.equal(r.joined, 1, r.errors.join('; '));
});

test('a push-pull carrying malformed entries: the sound ones merge, the others are dropped', { timeout: 20_000 }, async () => {
  const t = made.find((m) => m.localMember().name === 'val-t')!;
  const entry = (name: string, patch: Partial<PushNodeState> = {}): PushNodeState => ({
    name,
    addr: ip('127.0.16.20'),
    port: 7946,
    meta: null,
    incarnation: 1,
    state: NodeStateType.alive,
    vsn: VSN,
    ...patch,
  });
  const pp = encodePushPull({
    join: false,
    nodes: [entry('pp-sender', { addr: ip('127.0.16.10') }), entry('pp-ok'), entry('pp-short', { vsn: [1, 5] }), entry('pp-empty', { addr: Buffer.alloc(0) }), entry('pp-state', { state: 9 as NodeStateType })],
    userState: null,
  });
  const before = t.stats().entriesRefused;
  const s = await rawTcp('127.0.16.1', 7946, '127.0.16.10');
  sockets.push({ close: () => s.destroy() });
  s.write(Buffer.concat([labelHeader(LABEL), encodeStream(pp, { compress: false, label: LABEL, keyring: null })]));
  s.on('data', () => {});
  await waitFor(() => t.members().some((m) => m.name === 'pp-ok'), 5000, 'the sound entry merged');
  s.destroy();
  assert.deepEqual(t.members().map((m) => m.name).filter((n) => n.startsWith('pp-')).sort(), ['pp-ok', 'pp-sender']);
  assert.equal(t.stats().entriesRefused, before + 3);
});
