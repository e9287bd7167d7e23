/**
 * Issue 12, acceptance 1: a seeded, reproducible fuzz run against a real
 * member on real sockets. 10,000 UDP packets (random bytes, mutated sound
 * messages: truncations, bit flips, wrong lengths, huge counts; and
 * deliberately malformed alives: short or long Vsn, empty, foreign and
 * unroutable addresses, bad ports, names and metadata) plus 400 TCP
 * streams. Nothing crashes, the member keeps working, and a listening peer
 * that the member gossips to (and push-pulls with) never sees a malformed
 * entry, while it does see the sound ones sent in the same run.
 *
 * FUZZ_SEED=<n> reproduces another run; the default seed is fixed.
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import dgram from 'node:dgram';
import net from 'node:net';
import { Memberlist } from '../../src/mesh/memberlist/memberlist.ts';
import {
  Alive,
  MessageType,
  NodeStateType,
  PushNodeState,
  compressPayload,
  decodeBody,
  encodeAck,
  encodeAlive,
  encodeDead,
  encodeIndirectPing,
  encodeNack,
  encodePing,
  encodePushPull,
  encodeSuspect,
  encodeUserStreamMsg,
  makeCompoundMessage,
  readAlive,
  readDead,
  readPing,
  readSuspect,
} from '../../src/mesh/memberlist/codec/messages.ts';
import { labelHeader } from '../../src/mesh/memberlist/codec/label.ts';
import { addressPolicy, entryProblem, nameProblem } from '../../src/mesh/memberlist/codec/validate.ts';
import { ConnReader, StreamConn } from '../../src/mesh/memberlist/transport.ts';
import { StreamFramer, decodePacket, encodePacket, encodeStream } from '../../src/mesh/memberlist/codec/wire.ts';
import { realClock } from '../../src/mesh/memberlist/clock.ts';
import { waitFor } from './helpers.ts';
import { lzwBomb, rawTcp, rawUdp, sendUdp, compressMessage } from './hostile.ts';

const SEED = Number(process.env.FUZZ_SEED ?? 12);
const LABEL = 'viiwork-v2';
const T_IP = '127.0.19.1';
const L_IP = '127.0.19.2';
const VSN = [1, 5, 2, 2, 5, 5];
const ip = (s: string) => Buffer.from(s.split('.').map(Number));
const policy = addressPolicy(T_IP);

/** mulberry32: small, seeded, good enough for fuzzing. */
function rng(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n: number) => Math.floor(next() * n);
  return {
    next,
    int,
    pick: <T>(a: readonly T[]): T => a[int(a.length)],
    bytes: (n: number) => Buffer.from(Array.from({ length: n }, () => int(256))),
  };
}
type Rng = ReturnType<typeof rng>;

// --- what a listening peer sees ------------------------------------------------------

interface Seen {
  names: Set<string>;
  problems: string[];
  packets: number;
  pushPulls: number;
}

/** Checks one relayed entry; records its name and any problem. */
function inspect(seen: Seen, what: string, e: Alive): void {
  seen.names.add(e.node);
  const p = entryProblem(e, policy, false);
  if (p) seen.problems.push(`${what} ${JSON.stringify(e.node)}: ${p}`);
  if (e.node.startsWith('bad-')) seen.problems.push(`${what} relayed a deliberately malformed entry ${e.node}`);
}

async function listener(seen: Seen): Promise<{ close(): void }> {
  const udp = dgram.createSocket('udp4');
  await new Promise<void>((r) => udp.bind(7946, L_IP, () => r()));
  udp.on('message', (buf, rinfo) => {
    seen.packets++;
    let msgs: Buffer[];
    try {
      msgs = decodePacket(buf, { label: LABEL, keyring: null });
    } catch (e) {
      seen.problems.push(`undecodable packet from the member: ${(e as Error).message}`);
      return;
    }
    for (const m of msgs) {
      const body = m.subarray(1);
      try {
        switch (m[0]) {
          case MessageType.alive:
            inspect(seen, 'alive', decodeBody(body, readAlive));
            break;
          case MessageType.suspect:
          case MessageType.dead: {
            const s = decodeBody(body, m[0] === MessageType.suspect ? readSuspect : readDead);
            const p = nameProblem(s.node) ?? nameProblem(s.from);
            if (p || s.node.startsWith('bad-')) seen.problems.push(`relayed ${MessageType[m[0]]} for ${JSON.stringify(s.node)}: ${p}`);
            break;
          }
          case MessageType.ping: {
            // answer, so that the member keeps us alive
            const p = decodeBody(body, readPing);
            const ack = encodePacket(encodeAck({ seqNo: p.seqNo, payload: null }), { compress: false, crc: false, label: LABEL, keyring: null });
            udp.send(ack, rinfo.port, rinfo.address);
            break;
          }
        }
      } catch (e) {
        seen.problems.push(`undecodable ${MessageType[m[0]]} from the member: ${(e as Error).message}`);
      }
    }
  });
  const tcp = net.createServer((s) => {
    const conn: StreamConn = {
      remoteAddr: `${s.remoteAddress}:${s.remotePort}`,
      write: (b) => s.write(b),
      close: () => s.end(),
      onData: (cb) => s.on('data', cb),
      onClose: (cb) => s.on('close', cb),
    };
    s.on('error', () => {});
    const reader = new ConnReader(conn);
    void (async () => {
      try {
        await reader.read({ step: (b) => (b.length >= 2 + LABEL.length ? { value: null, consumed: 2 + LABEL.length } : null) }, realClock, 5000);
        const msg = await reader.read(new StreamFramer({ label: LABEL, keyring: null }), realClock, 5000);
        if ('pushPull' in msg) {
          seen.pushPulls++;
          for (const n of msg.pushPull.nodes) {
            inspect(seen, 'push-pull entry', { incarnation: n.incarnation, node: n.name, addr: n.addr, port: n.port, meta: n.meta, vsn: n.vsn });
          }
          s.write(encodeStream(encodePushPull({ join: false, nodes: [me()], userState: null }), { compress: false, label: LABEL, keyring: null }));
        }
      } catch (e) {
        // A stream the member opened and closed without a byte (its own deadline passed first, as on a loaded
        // machine) relays nothing, malformed or not; anything it did send must be a whole message.
        if (s.bytesRead > 0 || !/closed before a full message/.test((e as Error).message)) seen.problems.push(`bad stream from the member: ${(e as Error).message}`);
      } finally {
        setTimeout(() => s.destroy(), 50);
      }
    })();
  });
  await new Promise<void>((r) => tcp.listen(7946, L_IP, () => r()));
  return {
    close: () => {
      udp.close();
      tcp.close();
    },
  };
}

const me = (): PushNodeState => ({ name: 'listener', addr: ip(L_IP), port: 7946, meta: null, incarnation: 1, state: NodeStateType.alive, vsn: VSN });

// --- what the fuzzer sends -----------------------------------------------------------------

// Every sound node the fuzzer invents lives at the listener's address, and so
// would every malformed one the target wrongly stored: whatever the target
// gossips, probes or push-pulls goes to the listener.
function soundMessage(r: Rng, name: string): Buffer {
  const addr = ip(L_IP);
  switch (r.int(9)) {
    case 0:
    case 1:
      return encodeAlive({ incarnation: r.int(1000), node: name, addr, port: 7946, meta: r.int(2) ? Buffer.from('{"v":2}') : null, vsn: VSN });
    case 2:
      return encodeSuspect({ incarnation: r.int(10), node: name, from: 'x' });
    case 3:
      return encodeDead({ incarnation: r.int(10), node: name, from: name });
    case 4:
      return encodePing({ seqNo: r.int(1e6), node: 'fuzz-target', sourceAddr: addr, sourcePort: 7946, sourceNode: name });
    case 5:
      return encodeIndirectPing({ seqNo: r.int(1e6), target: addr, port: 7946, node: name, nack: true, sourceAddr: addr, sourcePort: 7946, sourceNode: 'y' });
    case 6:
      return encodeAck({ seqNo: r.int(1e6), payload: r.int(2) ? r.bytes(8) : null });
    case 7:
      return encodeNack({ seqNo: r.int(1e6) });
    default:
      return Buffer.concat([Buffer.from([MessageType.user]), r.bytes(r.int(40))]);
  }
}

/** An alive with exactly one defect; its name starts with "bad-". */
function malformedAlive(r: Rng, i: number): Buffer {
  const a: Alive = { incarnation: 5, node: `bad-${i}`, addr: ip(L_IP), port: 7946, meta: null, vsn: VSN };
  const defects: (() => void)[] = [
    () => (a.vsn = VSN.slice(0, 1 + r.int(5))), // short Vsn (1..5 bytes)
    () => (a.vsn = [...VSN, 0, 0].slice(0, 7 + r.int(2))), // long Vsn
    () => (a.vsn = []), // no versions for a node nobody knows
    () => (a.addr = Buffer.alloc(0)), // empty address
    () => (a.addr = r.bytes(r.pick([1, 3, 5, 8, 15, 17]))), // wrong length
    () => (a.addr = ip('0.0.0.0')),
    () => (a.addr = ip(`${224 + r.int(16)}.0.0.${r.int(256)}`)), // multicast
    () => (a.addr = ip('255.255.255.255')),
    () => (a.addr = Buffer.concat([Buffer.from([0x20, 0x01, 0x0d, 0xb8]), r.bytes(12)])), // IPv6 on an IPv4 mesh
    () => (a.port = 65536 + r.int(1e6)),
    () => (a.node = `bad-${i}-${'x'.repeat(300)}`),
    () => (a.meta = r.bytes(513 + r.int(200))),
    () => (a.incarnation = 2 ** 32 + r.int(1000)),
  ];
  r.pick(defects)();
  return encodeAlive(a);
}

function mutate(r: Rng, b: Buffer): Buffer {
  let out = Buffer.from(b);
  for (let k = 1 + r.int(4); k > 0; k--) {
    switch (r.int(7)) {
      case 0: // truncate
        out = out.subarray(0, r.int(out.length + 1));
        break;
      case 1: // flip a bit
        if (out.length) out[r.int(out.length)] ^= 1 << r.int(8);
        break;
      case 2: // set a byte
        if (out.length) out[r.int(out.length)] = r.int(256);
        break;
      case 3: // insert junk
        {
          const at = r.int(out.length + 1);
          out = Buffer.concat([out.subarray(0, at), r.bytes(1 + r.int(8)), out.subarray(at)]);
        }
        break;
      case 4: // huge counts: a map32 / array32 / raw32 header claiming billions
        {
          const at = r.int(out.length + 1);
          const head = Buffer.from([r.pick([0xdd, 0xdf, 0xdb, 0xc6]), 0xff, 0xff, 0xff, r.int(256)]);
          out = Buffer.concat([out.subarray(0, at), head, out.subarray(at)]);
        }
        break;
      case 5: // duplicate a slice
        {
          const at = r.int(out.length + 1);
          out = Buffer.concat([out, out.subarray(at, at + r.int(16))]);
        }
        break;
      default: // drop a byte
        if (out.length) {
          const at = r.int(out.length);
          out = Buffer.concat([out.subarray(0, at), out.subarray(at + 1)]);
        }
    }
  }
  return out;
}

/** A compound whose length table lies. */
function lyingCompound(r: Rng, parts: Buffer[]): Buffer {
  const c = makeCompoundMessage(parts);
  if (r.int(2)) c[1] = r.int(256); // wrong part count
  else if (parts.length) c.writeUInt16BE(r.int(65536), 2 + 2 * r.int(parts.length)); // wrong length
  return c;
}

function packet(r: Rng, i: number, okNames: string[]): Buffer {
  const wrap = (m: Buffer) => {
    const kind = r.int(10);
    if (kind < 6) return m;
    if (kind < 8) return compressPayload(m);
    return makeCompoundMessage([m, soundMessage(r, `mut-${i}-c`)]);
  };
  let payload: Buffer;
  const dice = r.int(100);
  if (dice < 30) payload = wrap(malformedAlive(r, i));
  else if (dice < 62) payload = mutate(r, wrap(soundMessage(r, `mut-${i}`)));
  else if (dice < 80) payload = r.bytes(r.int(1400));
  else if (dice < 88) payload = lyingCompound(r, [malformedAlive(r, i), soundMessage(r, `mut-${i}`)]);
  else if (dice < 93) payload = mutate(r, compressMessage(lzwBomb(r.int(200))));
  else if (dice < 98) payload = Buffer.concat([Buffer.from([r.pick([MessageType.alive, MessageType.compound, MessageType.compress, MessageType.hasCrc, MessageType.encrypt])]), r.bytes(r.int(64))]);
  else {
    const name = `ok-${okNames.length}`;
    okNames.push(name);
    return Buffer.concat([labelHeader(LABEL), encodeAlive({ incarnation: 1, node: name, addr: ip(L_IP), port: 7946, meta: null, vsn: VSN })]);
  }
  const withLabel = r.int(20) !== 0; // mostly our label, so the packet gets past the first check
  return withLabel ? Buffer.concat([labelHeader(LABEL), payload]) : payload;
}

function stream(r: Rng, i: number): Buffer {
  const entries: PushNodeState[] = [me()];
  for (let k = r.int(4); k > 0; k--) {
    const a = decodeBody(malformedAlive(r, i * 10 + k).subarray(1), readAlive);
    entries.push({ name: a.node, addr: a.addr, port: a.port, meta: a.meta, incarnation: a.incarnation, state: r.pick([0, 1, 2, 3, 9]) as NodeStateType, vsn: a.vsn });
  }
  const pp = encodePushPull({ join: !!r.int(2), nodes: entries, userState: r.int(2) ? r.bytes(r.int(100)) : null });
  const candidates = [
    () => encodeStream(pp, { compress: !!r.int(2), label: LABEL, keyring: null }),
    () => mutate(r, encodeStream(pp, { compress: !!r.int(2), label: LABEL, keyring: null })),
    () => mutate(r, encodeUserStreamMsg(r.bytes(r.int(50)))),
    () => r.bytes(r.int(300)),
    () => Buffer.concat([Buffer.from([MessageType.encrypt]), r.bytes(r.int(40))]),
    () => mutate(r, compressMessage(lzwBomb(r.int(2000)))),
  ];
  return Buffer.concat([labelHeader(LABEL), r.pick(candidates)()]);
}

// --- the run ------------------------------------------------------------------------

const closers: { close(): void }[] = [];
let target: Memberlist | undefined;
let newcomer: Memberlist | undefined;
after(async () => {
  for (const c of closers) c.close();
  await target?.shutdown();
  await newcomer?.shutdown();
});

test(`10,000 fuzzed packets and 400 streams (seed ${SEED}): nothing crashes, nothing malformed is relayed`, { timeout: 90_000 }, async (t) => {
  const r = rng(SEED);
  const seen: Seen = { names: new Set(), problems: [], packets: 0, pushPulls: 0 };
  closers.push(await listener(seen));
  target = await Memberlist.create({
    name: 'fuzz-target',
    bindAddr: T_IP,
    port: 7946,
    label: LABEL,
    probeIntervalMs: 200,
    probeTimeoutMs: 100,
    gossipIntervalMs: 20,
    pushPullIntervalMs: 500,
  });
  const tgt = target;
  // the listener introduces itself the way any member would
  const udp = await rawUdp('127.0.19.9');
  closers.push(udp);
  const pkt = (m: Buffer) => encodePacket(m, { compress: false, crc: false, label: LABEL, keyring: null });
  await sendUdp(udp, pkt(encodeAlive({ incarnation: 1, node: 'listener', addr: ip(L_IP), port: 7946, meta: null, vsn: VSN })), T_IP, 7946);
  await waitFor(() => tgt.members().some((m) => m.name === 'listener'), 5000, 'the target knows the listener');

  const okNames: string[] = [];
  const base = tgt.stats().packetsReceived;
  const N = 10_000;
  for (let i = 0; i < N; i += 50) {
    for (let j = i; j < i + 50; j++) await sendUdp(udp, packet(r, j, okNames), T_IP, 7946);
    // wait until the target has read this batch: no packet is lost to a full socket buffer
    await waitFor(() => tgt.stats().packetsReceived - base >= i + 50, 10_000, `target read packet ${i + 50}`, 1);
  }
  let streams = 0;
  for (let i = 0; i < 400; i += 20) {
    await Promise.all(
      Array.from({ length: 20 }, async (_, k) => {
        const s = await rawTcp(T_IP, 7946, '127.0.19.10');
        s.on('error', () => {});
        s.on('data', () => {});
        s.end(stream(r, i + k));
        await new Promise<void>((res) => s.once('close', () => res()));
        streams++;
      }),
    );
  }
  assert.equal(streams, 400);

  // sound entries from the same run reach the listener: relaying works, and had the bad ones been relayed, they would have too
  assert.ok(okNames.length >= 100, `only ${okNames.length} sound alives in the run`);
  await waitFor(() => okNames.every((n) => seen.names.has(n)), 20_000, 'the listener saw every sound alive').catch((e) => {
    throw new Error(`${e.message}: missing ${okNames.filter((n) => !seen.names.has(n)).join()}; listener: ${seen.packets} packets, ${seen.pushPulls} push-pulls, problems ${seen.problems.slice(0, 5).join(' / ')}; target members ${tgt.members().length}`);
  });
  const pp0 = seen.pushPulls;
  await waitFor(() => seen.pushPulls >= pp0 + 2 && tgt.state.broadcasts.numQueued() === 0, 20_000, 'two more push-pulls and an empty broadcast queue');

  const st = tgt.stats();
  t.diagnostic(
    `seed ${SEED}: ${N} packets (${st.packetsDropped} dropped whole, ${st.messagesDropped} messages dropped, ${st.entriesRefused} entries refused, ${st.decompressRefused} decompressions refused), ` +
      `${streams} streams (${st.streamsDropped} dropped); the listener got ${seen.packets} packets, ${seen.pushPulls} push-pulls, ${seen.names.size} names`,
  );
  assert.deepEqual(seen.problems.slice(0, 10), []);
  assert.ok(st.entriesRefused > 2000, `entries refused: ${st.entriesRefused}`);
  assert.ok(![...seen.names].some((n) => n.startsWith('bad-')));

  // and the target still works: a newcomer joins it and both see each other
  newcomer = await Memberlist.create({ name: 'fuzz-newcomer', bindAddr: '127.0.19.3', port: 7946, label: LABEL });
  const j = await newcomer.join([`${T_IP}:7946`]);
  assert.equal(j.joined, 1, j.errors.join('; '));
  await waitFor(() => tgt.members().some((m) => m.name === 'fuzz-newcomer' && m.state === 'alive'), 5000, 'the target lists the newcomer');
});
