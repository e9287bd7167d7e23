/**
 * Issue 12, item 3: TCP streams are read incrementally. A framing reader
 * finds where a message ends as bytes arrive (never re-parsing from the
 * start), with a byte cap and one deadline for the label and the first
 * message; a stream trickled in small pieces costs O(bytes).
 */
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { labelHeader } from '../../src/mesh/memberlist/codec/label.ts';
import { Keyring } from '../../src/mesh/memberlist/keyring.ts';
import { MessageType, NodeStateType, encodePushPull, encodeUserStreamMsg, writePushPullHeader, writePushNodeState } from '../../src/mesh/memberlist/codec/messages.ts';
import { MsgpackSkipper, Reader, Writer } from '../../src/mesh/memberlist/codec/msgpack.ts';
import { DecodeOptions, StreamFramer, encodeStream } from '../../src/mesh/memberlist/codec/wire.ts';
import { waitFor } from './helpers.ts';
import { ChildNode, assertCheap, closedByPeer, rawTcp } from './hostile.ts';

const LABEL = 'viiwork-v2';
const KEY = randomBytes(32);
const VSN = [1, 5, 2, 2, 5, 5];
const ip = (s: string) => Buffer.from(s.split('.').map(Number));

const pushPull = (nodes: number, userState: Buffer | null) =>
  encodePushPull({
    join: false,
    nodes: Array.from({ length: nodes }, (_, i) => ({
      name: `node-${i}`,
      addr: ip('10.0.0.1'),
      port: 7946,
      meta: Buffer.from(JSON.stringify({ v: 2, i })),
      incarnation: i,
      state: NodeStateType.alive,
      vsn: VSN,
    })),
    userState,
  });

test('the framer finds the end of every kind of message fed one byte at a time, and decodes it once', () => {
  const kr = new Keyring([KEY]);
  const plain: DecodeOptions = { label: LABEL, keyring: null };
  const secured = { label: LABEL, keyring: kr };
  const cases: [string, Buffer, typeof plain][] = [
    ['push-pull', pushPull(3, Buffer.from([0x80, 1, 2])), plain],
    ['push-pull, compressed', encodeStream(pushPull(3, Buffer.from([0x80])), { compress: true, label: LABEL, keyring: null }), plain],
    ['push-pull, encrypted', encodeStream(pushPull(2, null), { compress: true, label: LABEL, keyring: kr }), secured],
    ['user message', encodeUserStreamMsg(Buffer.from('hello')), plain],
  ];
  for (const [what, msg, o] of cases) {
    const withTail = Buffer.concat([msg, Buffer.from([0xde, 0xad])]);
    const f = new StreamFramer(o);
    for (let n = 0; n < msg.length; n++) assert.equal(f.step(withTail.subarray(0, n)), null, `${what}: incomplete at ${n}`);
    const r = f.step(withTail);
    assert.ok(r, what);
    assert.equal(r.consumed, msg.length, what);
  }
  // the skipper agrees with the decoder on where values end, for every msgpack family
  const w = new Writer();
  w.struct([
    { name: 'A', kind: 'uint', value: 2 ** 40 },
    { name: 'B', kind: 'int', value: -70000 },
    { name: 'C', kind: 'bytes', value: Buffer.alloc(70000, 1) },
    { name: 'D', kind: 'str', value: 'x'.repeat(300) },
    { name: 'E', kind: 'bool', value: true },
  ]);
  w.raw(Buffer.from([0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xd6, 1, 0, 0, 0, 0, 0xc7, 2, 5, 9, 9, 0xdc, 0, 1, 0xc0]));
  const buf = w.toBuffer();
  const r = new Reader(buf);
  r.value();
  r.value();
  const sk = new MsgpackSkipper(0, 2);
  for (let n = 0; n < r.pos; n++) assert.equal(sk.scan(buf, n), false);
  assert.equal(sk.scan(buf), true);
  assert.equal(sk.pos, r.pos);
});

test('the framer refuses oversized messages and absurd counts before buffering them', () => {
  const o = { label: '', keyring: null };
  // a raw value announcing 30 MB: refused once more than the cap has arrived, whatever the claim
  const f = new StreamFramer(o, 1000);
  const head = Buffer.from([MessageType.compress, 0x82, 0xa4, ...Buffer.from('Algo'), 0, 0xa3, ...Buffer.from('Buf'), 0xdb, 0x01, 0xc9, 0xc3, 0x80]);
  assert.equal(f.step(Buffer.concat([head, Buffer.alloc(900)])), null);
  assert.throws(() => f.step(Buffer.concat([head, Buffer.alloc(1001)])), /larger than 1000/);
  // a user message or push-pull whose header claims too much is refused at the header
  const user = new Writer().byte(MessageType.user);
  user.struct([{ name: 'UserMsgLen', kind: 'int', value: 30 * 1024 * 1024 }]);
  assert.throws(() => new StreamFramer(o).step(user.toBuffer()), /bad user message length/);
  const pp = new Writer().byte(MessageType.pushPull);
  writePushPullHeader(pp, { nodes: 2 ** 31, userStateLen: 0, join: false });
  assert.throws(() => new StreamFramer(o).step(pp.toBuffer()), /bad push-pull node count/);
  // deep nesting is refused, not recursed into
  assert.throws(() => new StreamFramer(o).step(Buffer.concat([Buffer.from([MessageType.ping]), Buffer.alloc(100, 0x91)])), /nested too deeply/);
});

test('framing a 16 MB message that arrives in 4 KB pieces takes linear time', () => {
  const msg = encodeUserStreamMsg(Buffer.alloc(16 * 1024 * 1024, 0x80));
  const f = new StreamFramer({ label: '', keyring: null });
  const t0 = performance.now();
  let r = null;
  for (let n = 4096; !r; n = Math.min(msg.length, n + 4096)) r = f.step(msg.subarray(0, n));
  const ms = performance.now() - t0;
  assert.equal(r.consumed, msg.length);
  // quadratic re-parsing would touch ~32 GB here
  assert.ok(ms < 1000, `took ${ms} ms`);
});

let secured: ChildNode;
let open: ChildNode;
before(async () => {
  secured = new ChildNode('trickle-secured', '127.0.15.1', 7946, LABEL, KEY.toString('base64'), '', { ML_TCP_TIMEOUT_MS: '2000' });
  open = new ChildNode('trickle-open', '127.0.15.2', 7946, LABEL, '', '', { ML_TCP_TIMEOUT_MS: '2000' });
  await Promise.all([secured.started(), open.started()]);
});
after(() => {
  secured?.kill();
  open?.kill();
});

/** A 3 s trickle: no stall over 50 ms, at most 40% of a core on average, memory bounded by what was sent. */
const TRICKLE_LIMITS = { stallMs: 50, cpuMs: 1200, rssMB: 64 };

/**
 * Trickles like the attack in the issue: after `head`, one `piece` every
 * millisecond or so (flushed separately: no Nagle) until `ms` have passed.
 * Returns the bytes sent.
 */
async function trickle(s: net.Socket, head: Buffer, piece: () => Buffer, ms: number): Promise<number> {
  s.setNoDelay(true);
  s.on('error', () => {});
  s.write(head);
  let sent = head.length;
  const end = Date.now() + ms;
  while (Date.now() < end && !s.destroyed) {
    const p = piece();
    sent += p.length;
    // The node may close the stream at its deadline while the socket's buffer is full: then 'close' comes, never 'drain'.
    if (!s.write(p)) await new Promise((r) => {
      s.once('drain', r);
      s.once('close', r);
    });
    await new Promise((r) => setTimeout(r, 1));
  }
  return sent;
}

test('four trickled encrypted-stream headers plus junk cannot stall a secured node (> 50 ms)', { timeout: 60_000 }, async (t) => {
  await secured.mark();
  const head = Buffer.concat([labelHeader(LABEL), Buffer.from([MessageType.encrypt, 0x01, 0x40, 0, 0])]); // claims 20 MiB
  const junk = Buffer.alloc(1024, 0x41);
  const conns = await Promise.all([1, 2, 3, 4].map((i) => rawTcp('127.0.15.1', 7946, `127.0.15.${10 + i}`)));
  const sent = await Promise.all(conns.map((s) => trickle(s, head, () => junk, 3000)));
  const st = await secured.stats();
  for (const s of conns) s.destroy();
  const mb = sent.reduce((a, b) => a + b, 0) / 1e6;
  // Before the framing reader each piece re-copied everything received so far,
  // which kept a core busy for the whole 3 s; now the CPU goes to receiving
  // some 8,000 small TCP reads (hence a CPU bound for the window, not per bomb).
  t.diagnostic(assertCheap(st, `4 connections, ${mb.toFixed(1)} MB in 1 KB pieces over 3 s`, TRICKLE_LIMITS));
});

test('a trickled plaintext push-pull (100,000 announced nodes) cannot stall an open node (> 50 ms)', { timeout: 60_000 }, async (t) => {
  await open.mark();
  const w = new Writer().byte(MessageType.pushPull);
  writePushPullHeader(w, { nodes: 100_000, userStateLen: 0, join: false });
  const node = new Writer();
  writePushNodeState(node, { name: 'n', addr: ip('10.0.0.1'), port: 7946, meta: null, incarnation: 1, state: NodeStateType.alive, vsn: VSN });
  const entries = Buffer.concat(Array(16).fill(node.toBuffer()));
  const s = await rawTcp('127.0.15.2', 7946, '127.0.15.20');
  const sent = await trickle(s, Buffer.concat([labelHeader(LABEL), w.toBuffer()]), () => entries, 3000);
  const st = await open.stats();
  s.destroy();
  // before, each piece re-parsed every node entry received so far
  t.diagnostic(assertCheap(st, `${(sent / 1e6).toFixed(1)} MB of push-pull entries in ${entries.length}-byte pieces over 3 s`, TRICKLE_LIMITS));
});

test('a stream that has not delivered a whole message by the deadline is closed', { timeout: 20_000 }, async () => {
  const before = (await open.stats()).ml.streamsDropped;
  const s = await rawTcp('127.0.15.2', 7946, '127.0.15.21');
  s.write(labelHeader(LABEL));
  const t0 = Date.now();
  const drip = setInterval(() => s.writable && s.write(Buffer.from([0x90 + 1])), 100); // nests one level at a time
  try {
    s.write(Buffer.from([MessageType.ping]));
    await closedByPeer(s, 8000);
  } finally {
    clearInterval(drip);
    s.destroy();
  }
  const took = Date.now() - t0;
  // ML_TCP_TIMEOUT_MS is 2000 for the children; nesting is refused at depth 32 (3.2 s of drip), so the deadline came first
  assert.ok(took >= 1500 && took < 3100, `closed after ${took} ms`);
  await waitFor(async () => (await open.stats()).ml.streamsDropped === before + 1, 2000, 'the stream is counted as dropped');
});
