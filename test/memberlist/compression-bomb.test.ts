/**
 * Issue 12, item 1: compressed messages are bounded. A packet may expand to
 * at most 64 KiB (MAX_PACKET_DECOMPRESSED_BYTES) and a stream message to
 * 20 MiB (MAX_STREAM_DECOMPRESSED_BYTES); anything beyond is refused before
 * any output is allocated. The target runs in a child process that measures
 * its own event-loop delay, CPU time and peak RSS around the attack.
 */
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { labelHeader } from '../../src/mesh/memberlist/codec/label.ts';
import { lzwCompress, lzwDecompress, DecompressLimitError } from '../../src/mesh/memberlist/codec/lzw.ts';
import {
  MAX_PACKET_DECOMPRESSED_BYTES,
  MAX_STREAM_DECOMPRESSED_BYTES,
  MessageType,
  writePushPullHeader,
} from '../../src/mesh/memberlist/codec/messages.ts';
import { Memberlist } from '../../src/mesh/memberlist/memberlist.ts';
import { Writer } from '../../src/mesh/memberlist/codec/msgpack.ts';
import { waitFor } from './helpers.ts';
import { ChildNode, assertCheap, closedByPeer, compressMessage, lzwBomb, rawTcp, rawUdp, sendUdp } from './hostile.ts';

const LABEL = 'viiwork-v2';
const TARGET = '127.0.12.1';
const ATTACKER = '127.0.12.9';
let target: ChildNode;
const made: Memberlist[] = [];

before(async () => {
  target = new ChildNode('bomb-target', TARGET, 7946, LABEL);
  await target.started();
});
after(async () => {
  target?.kill();
  await Promise.all(made.map((m) => m.shutdown()));
});

test('the caps are documented constants: 64 KiB per packet, 20 MiB per stream message', () => {
  assert.equal(MAX_PACKET_DECOMPRESSED_BYTES, 65536);
  assert.equal(MAX_STREAM_DECOMPRESSED_BYTES, 20 * 1024 * 1024);
  const bomb = lzwBomb(26_000);
  assert.ok(bomb.length < 45_000, `bomb is ${bomb.length} bytes`);
  // it really is a bomb: over 100 MB when nothing stops it
  assert.throws(() => lzwDecompress(bomb, 100_000_000), DecompressLimitError);
  assert.throws(() => lzwDecompress(bomb, MAX_STREAM_DECOMPRESSED_BYTES), DecompressLimitError);
  assert.equal(lzwDecompress(lzwBomb(0), 8_000_000).length, (3839 * 3840) / 2);
  assert.equal(lzwDecompress(lzwBomb(2), 8_000_000).length, (3839 * 3840) / 2 + 2 * 3839);
  // exactly at the limit is fine, one byte more is not
  const data = Buffer.alloc(5000, 7);
  assert.equal(lzwDecompress(lzwCompress(data), 5000).length, 5000);
  assert.throws(() => lzwDecompress(lzwCompress(data), 4999), DecompressLimitError);
});

test('UDP compression bombs are dropped: event loop stall < 50 ms, < 300 ms CPU, < 64 MB, one warning naming the sender', async (t) => {
  const sock = await rawUdp(ATTACKER);
  const bomb = Buffer.concat([labelHeader(LABEL), compressMessage(lzwBomb(26_000))]);
  assert.ok(bomb.length < 50_000);
  await target.mark();
  const before = (await target.stats()).ml.decompressRefused;
  for (let i = 0; i < 10; i++) await sendUdp(sock, bomb, TARGET, 7946);
  await waitFor(async () => (await target.stats()).ml.decompressRefused >= before + 10, 10_000, 'all ten bombs seen and refused');
  const s = await target.stats();
  sock.close();
  t.diagnostic(assertCheap(s, '10 UDP bombs'));
  const warnings = target.stderr.split('\n').filter((l) => l.startsWith('warn') && l.includes('expands beyond 65536'));
  assert.equal(warnings.length, 1, target.stderr);
  assert.match(warnings[0], new RegExp(ATTACKER.replace(/\./g, '\\.')));
  assert.match(warnings[0], /"kind":"oversize"/);
});

test('a TCP compression bomb is refused and the connection closed: stall < 50 ms, < 300 ms CPU, < 64 MB', async (t) => {
  await target.mark();
  const before = (await target.stats()).ml;
  // another source address: warnings are rate-limited per kind and peer host
  const s = await rawTcp(TARGET, 7946, '127.0.12.8');
  s.write(Buffer.concat([labelHeader(LABEL), compressMessage(lzwBomb(26_000))]));
  await closedByPeer(s, 5000);
  const st = await target.stats();
  assert.equal(st.ml.decompressRefused, before.decompressRefused + 1);
  t.diagnostic(assertCheap(st, 'TCP bomb'));
  assert.match(target.stderr, /warn dropped a compressed stream from 127\.0\.12\.8:\d+: it expands beyond 20971520 bytes/);
});

test('a compressed stream message is decompressed once: truncated contents end the stream at once', async () => {
  // a push-pull header announcing 3 nodes, with none after it, compressed
  const w = new Writer().byte(MessageType.pushPull);
  writePushPullHeader(w, { nodes: 3, userStateLen: 0, join: true });
  const inner = w.toBuffer();
  const before = (await target.stats()).ml.streamsDropped;
  const s = await rawTcp(TARGET, 7946, ATTACKER);
  s.write(Buffer.concat([labelHeader(LABEL), compressMessage(lzwCompress(inner))]));
  // more bytes trickling in must not matter (before, each one re-ran the decompression)
  const trickle = setInterval(() => s.writable && s.write(Buffer.from([0x80])), 20);
  try {
    await closedByPeer(s, 3000);
  } finally {
    clearInterval(trickle);
    s.destroy();
  }
  assert.equal((await target.stats()).ml.streamsDropped, before + 1);
});

test('a legitimate 15 MB push-pull still works, in both directions', { timeout: 60_000 }, async () => {
  const big = (seed: number) => {
    const b = Buffer.alloc(15 * 1024 * 1024);
    let x = seed;
    for (let i = 0; i < b.length; i++) {
      x = (Math.imul(x, 1103515245) + 12345) >>> 0;
      b[i] = 0x80 + ((x >>> 16) & 0x0f);
    }
    return b;
  };
  const stateA = big(1);
  const stateB = big(2);
  const got: Record<string, Buffer> = {};
  const mk = async (name: string, ip: string, mine: Buffer) => {
    const ml = await Memberlist.create(
      { name, bindAddr: ip, port: 7946, label: LABEL, pushPullIntervalMs: 0, tcpTimeoutMs: 30_000 },
      { localState: () => mine, mergeRemoteState: (buf) => (got[name] = Buffer.from(buf)) },
    );
    made.push(ml);
    return ml;
  };
  const a = await mk('big-a', '127.0.12.3', stateA);
  await mk('big-b', '127.0.12.4', stateB);
  const r = await a.join(['127.0.12.4:7946']);
  assert.equal(r.joined, 1, r.errors.join('; '));
  await waitFor(() => !!got['big-a'] && !!got['big-b'], 30_000, 'both sides merged the other state');
  assert.ok(got['big-a'].equals(stateB), 'a got b’s 15 MB state');
  assert.ok(got['big-b'].equals(stateA), 'b got a’s 15 MB state');
});
