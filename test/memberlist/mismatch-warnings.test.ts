/**
 * Issue 12, item 5: label, key and mode mismatches are operator warnings
 * naming the peer's address, on the receiving side and on the joining side
 * (by the time join() returns), at most one per kind and peer host per
 * warnIntervalMs.
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Memberlist, MemberlistConfig } from '../../src/mesh/memberlist/memberlist.ts';
import { encodePing } from '../../src/mesh/memberlist/codec/messages.ts';
import { encodePacket } from '../../src/mesh/memberlist/codec/wire.ts';
import { waitFor } from './helpers.ts';
import { rawUdp, sendUdp } from './hostile.ts';

const made: Memberlist[] = [];
after(async () => {
  await Promise.all(made.map((m) => m.shutdown()));
});

interface Logged {
  level: string;
  msg: string;
  kind?: string;
}
async function make(name: string, ip: string, cfg: Partial<MemberlistConfig>): Promise<{ ml: Memberlist; logs: Logged[] }> {
  const logs: Logged[] = [];
  const ml = await Memberlist.create({
    name,
    bindAddr: ip,
    port: 7946,
    label: 'viiwork-v2',
    pushPullIntervalMs: 0,
    tcpTimeoutMs: 3000,
    ...cfg,
    logger: (level, msg, f) => logs.push({ level, msg, kind: f?.kind as string | undefined }),
  });
  made.push(ml);
  return { ml, logs };
}
const warnings = (logs: Logged[], kind: string) => logs.filter((l) => l.level === 'warn' && l.kind === kind);

test('a label mismatch is a warning on both sides, the joining side within its one join attempt', async () => {
  const a = await make('lbl-a', '127.0.17.1', { label: 'blue' });
  const b = await make('lbl-b', '127.0.17.2', { label: 'green' });
  const c = await make('lbl-c', '127.0.17.3', { label: '' });
  const r = await a.ml.join(['127.0.17.2:7946']);
  assert.equal(r.joined, 0);
  // joining side: logged by the time join() has returned
  const mine = warnings(a.logs, 'label');
  assert.equal(mine.length, 1, JSON.stringify(a.logs));
  assert.match(mine[0].msg, /127\.0\.17\.2:7946 closed the stream without answering: it probably uses another label \(this node's label: "blue"\)/);
  await waitFor(() => warnings(b.logs, 'label').length > 0, 5000, 'b warns');
  assert.match(warnings(b.logs, 'label')[0].msg, /label mismatch: a stream from 127\.0\.17\.1:\d+ has label "blue", this node's is "green"/);
  // a peer with no label at all, in both directions
  assert.equal((await c.ml.join(['127.0.17.1:7946'])).joined, 0);
  assert.match(warnings(c.logs, 'label')[0]?.msg ?? '', /127\.0\.17\.1:7946 closed the stream without answering: it probably uses another label \(this node's label: ""\)/);
  await waitFor(() => warnings(a.logs, 'label').some((l) => /has label "", this node's is "blue"/.test(l.msg)), 5000, 'a warns about c');
  // packets too
  const s = await rawUdp('127.0.17.9');
  await sendUdp(s, encodePacket(encodePing({ seqNo: 1, node: 'lbl-a' }), { compress: false, crc: false, label: 'red', keyring: null }), '127.0.17.1', 7946);
  await waitFor(() => warnings(a.logs, 'label').some((l) => /a packet from 127\.0\.17\.9:\d+ has label "red", this node's is "blue"/.test(l.msg)), 5000, 'a warns about the packet');
  s.close();
});

test('repeated mismatches from one peer give one warning per interval', async () => {
  const a = await make('rep-a', '127.0.17.11', { label: 'blue' });
  await make('rep-b', '127.0.17.12', { label: 'green' });
  for (let i = 0; i < 3; i++) assert.equal((await a.ml.join(['127.0.17.12:7946'])).joined, 0);
  assert.equal(warnings(a.logs, 'label').length, 1);
  assert.equal(a.logs.filter((l) => l.level === 'debug' && l.kind === 'label').length, 2, 'the repeats are debug lines');
});

test('key and mode mismatches are warnings on both sides, naming the peer', async () => {
  const k1 = randomBytes(32);
  const s1 = await make('key-1', '127.0.17.21', { keys: [k1] });
  const s2 = await make('key-2', '127.0.17.22', { keys: [randomBytes(32)] });
  const open = await make('key-open', '127.0.17.23', {});
  assert.equal((await s1.ml.join(['127.0.17.22:7946'])).joined, 0);
  assert.match(warnings(s1.logs, 'encryption')[0]?.msg ?? '', /127\.0\.17\.22:7946 could not be decrypted: it uses another key/);
  await waitFor(() => warnings(s2.logs, 'encryption').length > 0, 5000, 'the other keyed node warns');
  assert.match(warnings(s2.logs, 'encryption')[0].msg, /127\.0\.17\.21:\d+ could not be decrypted/);

  assert.equal((await open.ml.join(['127.0.17.21:7946'])).joined, 0);
  assert.match(warnings(open.logs, 'mode')[0]?.msg ?? '', /mesh mode mismatch: encrypted stream from 127\.0\.17\.21:7946, but this node is plaintext/);
  await waitFor(() => warnings(s1.logs, 'mode').length > 0, 5000, 'the secured node warns');
  assert.match(warnings(s1.logs, 'mode')[0].msg, /mesh mode mismatch: plaintext stream from 127\.0\.17\.23:\d+, but this node is encrypted/);

  assert.equal((await s2.ml.join(['127.0.17.23:7946'])).joined, 0);
  assert.match(warnings(s2.logs, 'mode')[0]?.msg ?? '', /mesh mode mismatch: plaintext stream from 127\.0\.17\.23:7946, but this node is encrypted/);
});
