/**
 * Label header bytes pinned from upstream memberlist's label.go format
 * ([244][len][label]); Debian's Go 0.2.x has no labels, so these bytes are
 * written by hand from the upstream definition.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { addLabelHeaderToPacket, peekStreamLabel, removeLabelHeaderFromPacket, labelHeader } from '../../src/mesh/memberlist/codec/label.ts';
import { decodePacket, encodePacket, encodeStream, decodeStream } from '../../src/mesh/memberlist/codec/wire.ts';
import { Keyring } from '../../src/mesh/memberlist/keyring.ts';
import { encodePing } from '../../src/mesh/memberlist/codec/messages.ts';
import { decryptPayload } from '../../src/mesh/memberlist/security.ts';

test('label header is [244][len][label] and absent for the empty label', () => {
  assert.equal(labelHeader('viiwork-v2').toString('hex'), 'f40a' + Buffer.from('viiwork-v2').toString('hex'));
  assert.deepEqual(addLabelHeaderToPacket(Buffer.from([1, 2, 3]), 'foo'), Buffer.from([244, 3, 0x66, 0x6f, 0x6f, 1, 2, 3]));
  assert.deepEqual(addLabelHeaderToPacket(Buffer.from([1, 2, 3]), ''), Buffer.from([1, 2, 3]));
  assert.throws(() => labelHeader('x'.repeat(256)), /too long/);
  assert.doesNotThrow(() => labelHeader('x'.repeat(255)));
});

test('label header is removed from packets; truncated or empty headers are errors', () => {
  assert.deepEqual(removeLabelHeaderFromPacket(Buffer.from([244, 3, 0x66, 0x6f, 0x6f, 9])), { label: 'foo', buf: Buffer.from([9]) });
  assert.deepEqual(removeLabelHeaderFromPacket(Buffer.from([0, 1])), { label: '', buf: Buffer.from([0, 1]) });
  assert.throws(() => removeLabelHeaderFromPacket(Buffer.from([244])), /truncated/);
  assert.throws(() => removeLabelHeaderFromPacket(Buffer.from([244, 0])), /empty/);
  assert.throws(() => removeLabelHeaderFromPacket(Buffer.from([244, 5, 1])), /truncated/);
  assert.equal(peekStreamLabel(Buffer.from([244, 3, 0x66])), null);
  assert.deepEqual(peekStreamLabel(Buffer.from([244, 3, 0x66, 0x6f, 0x6f, 7])), { label: 'foo', consumed: 5 });
  assert.deepEqual(peekStreamLabel(Buffer.from([6])), { label: '', consumed: 0 });
});

test('label is outermost on packets and is the AES-GCM additional data', () => {
  const kr = new Keyring([Buffer.alloc(32, 1)]);
  const ping = encodePing({ seqNo: 1, node: 'a' });
  const pkt = encodePacket(ping, { compress: false, crc: false, label: 'viiwork-v2', keyring: kr });
  assert.deepEqual(pkt.subarray(0, 12), labelHeader('viiwork-v2'));
  assert.equal(pkt[12], 1, 'encryption version follows the label');
  assert.deepEqual(decryptPayload(kr.getKeys(), pkt.subarray(12), Buffer.from('viiwork-v2')), ping);
  assert.throws(() => decryptPayload(kr.getKeys(), pkt.subarray(12), null));
  assert.deepEqual(decodePacket(pkt, { label: 'viiwork-v2', keyring: kr }), [ping]);
  assert.throws(() => decodePacket(pkt, { label: 'other', keyring: kr }), /label mismatch/);
  assert.throws(() => decodePacket(ping, { label: 'viiwork-v2', keyring: null }), /label mismatch/);
  const plain = encodePacket(ping, { compress: false, crc: false, label: 'x', keyring: null });
  assert.deepEqual(decodePacket(plain, { label: 'x', keyring: null }), [ping]);
});

test('stream encryption binds the label into the additional data', () => {
  const kr = new Keyring([Buffer.alloc(16, 2)]);
  const ping = encodePing({ seqNo: 9, node: 'b' });
  const s = encodeStream(ping, { compress: false, label: 'L', keyring: kr });
  const d = decodeStream(s, { label: 'L', keyring: kr });
  assert.ok(d);
  assert.throws(() => decodeStream(s, { label: 'M', keyring: kr }));
});
