/**
 * Byte-exact compatibility with Go memberlist 0.2.x: fixtures in
 * test/fixtures/memberlist/golden.json were written by
 * tools/memberlist-golden (Go, run offline); these tests need no Go.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import * as msg from '../../src/mesh/memberlist/codec/messages.ts';
import { MessageType, NodeStateType } from '../../src/mesh/memberlist/codec/messages.ts';
import { lzwCompress, lzwDecompress } from '../../src/mesh/memberlist/codec/lzw.ts';
import { decryptPayload, encryptPayload } from '../../src/mesh/memberlist/security.ts';
import { Reader } from '../../src/mesh/memberlist/codec/msgpack.ts';
import { decodeStream, encodePacket, decodePacket, encodeStream } from '../../src/mesh/memberlist/codec/wire.ts';
import { Keyring } from '../../src/mesh/memberlist/keyring.ts';

const fixtures = JSON.parse(
  readFileSync(fileURLToPath(new URL('../fixtures/memberlist/golden.json', import.meta.url)), 'utf8'),
) as Record<string, { hex: string; note: string }>;
const g = (name: string): Buffer => {
  const f = fixtures[name];
  assert.ok(f, `fixture ${name} exists`);
  return Buffer.from(f.hex, 'hex');
};

const ip = (s: string) => Buffer.from(s.split('.').map(Number));
const addrA = ip('127.0.1.1');
const addrB = ip('127.0.1.2');
const key = g('key');

function lcgBytes(n: number, seed: number, alphabet: string): Buffer {
  const out = Buffer.alloc(n);
  let x = seed >>> 0;
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    out[i] = alphabet.charCodeAt((x >>> 16) % alphabet.length);
  }
  return out;
}

const body = (b: Buffer) => b.subarray(1);

test('ping encodes byte-identically to Go (sorted keys, raw strings, omitempty)', () => {
  const p = { seqNo: 42, node: 'node-b', sourceAddr: addrA, sourcePort: 7946, sourceNode: 'node-a' };
  assert.equal(msg.encodePing(p).toString('hex'), g('ping').toString('hex'));
  assert.deepEqual(msg.decodeBody(body(g('ping')), msg.readPing), p);
  assert.equal(msg.encodePing({ seqNo: 1, node: 'x' }).toString('hex'), g('ping_minimal').toString('hex'));
});

test('indirect ping, ack, nack, err encode byte-identically to Go', () => {
  const ind = { seqNo: 7, target: addrB, port: 7946, node: 'node-b', nack: true, sourceAddr: addrA, sourcePort: 7946, sourceNode: 'node-a' };
  assert.equal(msg.encodeIndirectPing(ind).toString('hex'), g('indirect_ping').toString('hex'));
  assert.deepEqual(msg.decodeBody(body(g('indirect_ping')), msg.readIndirectPing), ind);
  assert.equal(msg.encodeAck({ seqNo: 300, payload: null }).toString('hex'), g('ack').toString('hex'));
  assert.equal(msg.encodeAck({ seqNo: 70000, payload: Buffer.from('hi') }).toString('hex'), g('ack_payload').toString('hex'));
  assert.deepEqual(msg.decodeBody(body(g('ack_payload')), msg.readAck), { seqNo: 70000, payload: Buffer.from('hi') });
  assert.equal(msg.encodeNack({ seqNo: 705032704 }).toString('hex'), g('nack').toString('hex'));
  assert.equal(msg.encodeErr({ error: 'boom' }).toString('hex'), g('err').toString('hex'));
});

test('suspect, dead and alive encode byte-identically to Go', () => {
  assert.equal(msg.encodeSuspect({ incarnation: 3, node: 'node-b', from: 'node-a' }).toString('hex'), g('suspect').toString('hex'));
  assert.equal(msg.encodeDead({ incarnation: 128, node: 'node-b', from: 'node-a' }).toString('hex'), g('dead').toString('hex'));
  assert.equal(msg.encodeDead({ incarnation: 2, node: 'node-a', from: 'node-a' }).toString('hex'), g('dead_left').toString('hex'));
  const a = {
    incarnation: 1,
    node: 'node-a',
    addr: addrA,
    port: 7946,
    meta: Buffer.from('{"v":2,"api":8086,"ver":"0.1.0","role":"node"}'),
    vsn: [1, 5, 2, 2, 5, 5],
  };
  assert.equal(msg.encodeAlive(a).toString('hex'), g('alive').toString('hex'));
  assert.deepEqual(msg.decodeBody(body(g('alive')), msg.readAlive), a);
  const nilMeta = { incarnation: 0, node: 'n', addr: addrA, port: 1, meta: null, vsn: null as unknown as number[] };
  assert.equal(msg.encodeAlive(nilMeta).toString('hex'), g('alive_nil_meta').toString('hex'));
  const long = {
    incarnation: 4294967295,
    node: 'long-node-name-'.repeat(3),
    addr: Buffer.from('00000000000000000000000000000001', 'hex'),
    port: 65535,
    meta: lcgBytes(300, 1, 'abcdefghij'),
    vsn: [1, 5, 2, 2, 5, 4],
  };
  assert.equal(msg.encodeAlive(long).toString('hex'), g('alive_long').toString('hex'));
  assert.deepEqual(msg.decodeBody(body(g('alive_long')), msg.readAlive), long);
});

test('compound message matches Go and splits back into its parts', () => {
  const parts = [g('ping'), g('suspect'), g('alive')];
  assert.equal(msg.makeCompoundMessage(parts).toString('hex'), g('compound').toString('hex'));
  const d = msg.decodeCompoundMessage(body(g('compound')));
  assert.equal(d.truncated, 0);
  assert.deepEqual(d.parts.map((p) => p.toString('hex')), parts.map((p) => p.toString('hex')));
  const cut = msg.decodeCompoundMessage(body(g('compound')).subarray(0, 7 + g('ping').length + 3));
  assert.equal(cut.truncated, 2);
});

test('LZW matches Go compress/lzw (LSB, literal width 8) in both directions', () => {
  const input = g('lzw_input');
  assert.deepEqual(input, lcgBytes(20000, 7, 'abcdefghijklmnopqrstuvwxyz'));
  for (const [name, inp] of [
    ['compressed_big', input],
    ['compressed_alive', g('alive')],
    ['compressed_empty', Buffer.alloc(0)],
    ['compressed_aaa', Buffer.from('a'.repeat(64))],
  ] as const) {
    assert.equal(msg.compressPayload(inp).toString('hex'), g(name).toString('hex'), name);
    assert.deepEqual(msg.decompressPayload(body(g(name))), inp, name);
  }
  const random = lcgBytes(100000, 99, 'ab');
  assert.deepEqual(lzwDecompress(lzwCompress(random), random.length), random);
});

test('packet pipeline: CRC wrapper, compression then CRC, like rawSendMsgPacket', () => {
  const ping = g('ping');
  assert.equal(encodePacket(ping, { compress: false, crc: true, label: '', keyring: null }).toString('hex'), g('packet_crc').toString('hex'));
  assert.equal(encodePacket(ping, { compress: false, crc: false, label: '', keyring: null }).toString('hex'), g('packet_nocrc').toString('hex'));
  assert.equal(
    encodePacket(g('alive_big'), { compress: true, crc: true, label: '', keyring: null }).toString('hex'),
    g('packet_compress_crc').toString('hex'),
  );
  const d = decodePacket(g('packet_compress_crc'), { label: '', keyring: null });
  assert.deepEqual(d, [g('alive_big')]);
  const bad = Buffer.from(g('packet_crc'));
  bad[bad.length - 1] ^= 1;
  assert.throws(() => decodePacket(bad, { label: '', keyring: null }), /checksum/);
});

test('encrypted packet from Go decrypts, and re-encrypts byte-identically with its nonce', () => {
  const pkt = g('packet_encrypted');
  const kr = new Keyring([key]);
  assert.deepEqual(decodePacket(pkt, { label: '', keyring: kr }), [g('alive_big')]);
  const nonce = pkt.subarray(1, 13);
  const again = encodePacket(g('alive_big'), { compress: true, crc: true, label: '', keyring: kr, nonce });
  assert.equal(again.toString('hex'), pkt.toString('hex'));
  // wrong key, or a keyring and plaintext: dropped
  assert.throws(() => decodePacket(pkt, { label: '', keyring: new Keyring([Buffer.alloc(32, 7)]) }));
  assert.throws(() => decodePacket(g('packet_crc'), { label: '', keyring: kr }));
  // the extra key is tried after the primary
  assert.deepEqual(decodePacket(pkt, { label: '', keyring: new Keyring([Buffer.alloc(32, 7), key]) }), [g('alive_big')]);
});

test('encryption version 0 (PKCS7) decrypts; label is the additional data', () => {
  assert.deepEqual(decryptPayload([key], g('encrypted_v0'), null), g('ping'));
  const v1 = g('encrypted_v1_label');
  assert.deepEqual(decryptPayload([key], v1, Buffer.from('viiwork-v2')), g('ping'));
  assert.throws(() => decryptPayload([key], v1, null));
  assert.equal(encryptPayload(1, key, g('ping'), Buffer.from('viiwork-v2'), v1.subarray(1, 13)).toString('hex'), v1.toString('hex'));
  const v0 = g('encrypted_v0');
  assert.equal(encryptPayload(0, key, g('ping'), null, v0.subarray(1, 13)).toString('hex'), v0.toString('hex'));
});

const nodes = [
  { name: 'node-a', addr: addrA, port: 7946, meta: Buffer.from('{"v":2}'), incarnation: 3, state: NodeStateType.alive, vsn: [1, 5, 2, 2, 5, 5] },
  { name: 'node-b', addr: addrB, port: 7946, meta: null, incarnation: 1, state: NodeStateType.suspect, vsn: [1, 5, 2, 2, 5, 4] },
  { name: 'node-c', addr: ip('127.0.1.3'), port: 7947, meta: Buffer.alloc(0), incarnation: 9, state: NodeStateType.left, vsn: [1, 5, 2, 2, 5, 5] },
];
const userState = Buffer.from([0x80, 1, 2, 3, 0x61, 0x6c, 0x69, 0x61, 0x73]);

test('push-pull stream matches Go sendLocalState, plain and compressed', () => {
  const plain = msg.encodePushPull({ join: true, nodes, userState });
  assert.equal(encodeStream(plain, { compress: false, label: '', keyring: null }).toString('hex'), g('pushpull_plain').toString('hex'));
  const comp = msg.encodePushPull({ join: false, nodes, userState });
  assert.equal(encodeStream(comp, { compress: true, label: '', keyring: null }).toString('hex'), g('pushpull_compressed').toString('hex'));
  const none = msg.encodePushPull({ join: false, nodes, userState: null });
  assert.equal(encodeStream(none, { compress: false, label: '', keyring: null }).toString('hex'), g('pushpull_nouser').toString('hex'));
  for (const [name, join, us] of [
    ['pushpull_plain', true, userState],
    ['pushpull_compressed', false, userState],
    ['pushpull_nouser', false, null],
  ] as const) {
    const r = decodeStream(g(name), { label: '', keyring: null });
    assert.ok(r && 'pushPull' in r.msg, name);
    assert.equal(r.consumed, g(name).length);
    assert.deepEqual(r.msg.pushPull, { join, nodes, userState: us });
  }
});

test('encrypted push-pull stream from Go decodes; same nonce re-encrypts identically', () => {
  const kr = new Keyring([key]);
  const buf = g('pushpull_encrypted');
  const r = decodeStream(buf, { label: '', keyring: kr });
  assert.ok(r && 'pushPull' in r.msg);
  assert.deepEqual(r.msg.pushPull, { join: true, nodes, userState });
  const again = encodeStream(msg.encodePushPull({ join: true, nodes, userState }), {
    compress: true,
    label: '',
    keyring: kr,
    nonce: buf.subarray(6, 18),
  });
  assert.equal(again.toString('hex'), buf.toString('hex'));
  // partial input asks for more
  assert.equal(decodeStream(buf.subarray(0, buf.length - 1), { label: '', keyring: kr }), null);
  assert.throws(() => decodeStream(g('pushpull_plain'), { label: '', keyring: kr }), /not encrypted/);
});

test('stream ack matches Go rawSendMsgStream', () => {
  const ack = msg.encodeAck({ seqNo: 42, payload: null });
  assert.equal(encodeStream(ack, { compress: false, label: '', keyring: null }).toString('hex'), g('stream_ack_plain').toString('hex'));
  const r = decodeStream(g('stream_ack_plain'), { label: '', keyring: null });
  assert.ok(r && 'ack' in r.msg);
  assert.deepEqual(r.msg.ack, { seqNo: 42, payload: null });
});

test('msgpack decoder reads str8/bin/ext forms newer encoders use', () => {
  const r = new Reader(Buffer.from([0x82, 0xd9, 0x01, 0x41, 0xc4, 0x02, 1, 2, 0xa1, 0x42, 0xcd, 0x01, 0x00]));
  const s = r.struct();
  assert.deepEqual(s.bytes('A'), Buffer.from([1, 2]));
  assert.equal(s.uint('B'), 256);
});
