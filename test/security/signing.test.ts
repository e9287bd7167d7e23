import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { Writable } from 'node:stream';
import { describe, test } from 'node:test';
import {
  SIGNING_V2_SINCE,
  versionBefore,
  EMPTY_BODY_SHA256,
  HashingPassThrough,
  MAX_SKEW_MS,
  RequestSigner,
  RequestVerifier,
  canonicalString,
  deriveSigningKey,
  sha256Hex,
  signRequest,
  type SignedHeaders,
} from '../../src/security/signing.ts';
import { classifyForwardHeaders, removeMeshHeaders } from '../../src/security/headers.ts';

const T0 = 1_764_441_600_123;
const secretA = Buffer.alloc(32, 0xa1);
const secretB = Buffer.alloc(32, 0xb2);
const body = Buffer.from('{"model":"m","messages":[]}');
const base = { method: 'POST', pathWithQuery: '/v1/chat/completions?host=gpu2', node: 'gpu1', to: 'gpu2', self: 'gpu2', bodySha256: sha256Hex(body) };

function clock(start = T0) {
  const c = { t: start, now: () => c.t };
  return c;
}

function lower(h: SignedHeaders): Record<string, string> {
  return Object.fromEntries(Object.entries(h).map(([k, v]) => [k.toLowerCase(), v]));
}

describe('signed forwards', () => {
  test('a signed request verifies and names its sender', () => {
    const c = clock();
    const headers = new RequestSigner(secretA, { now: c.now }).sign(base);
    assert.match(headers['X-Viiwork-Auth'], /^v2=[0-9a-f]{64}$/);
    assert.match(headers['X-Viiwork-Nonce'], /^[0-9a-f]{32}$/);
    assert.equal(headers['X-Viiwork-Ts'], String(T0));
    const v = new RequestVerifier({ secrets: [secretA], now: c.now });
    assert.deepEqual(v.verify({ ...base, headers: lower(headers) }), { ok: true, node: 'gpu1', ts: T0 });
  });

  test('header names are matched case-insensitively', () => {
    const c = clock();
    const headers = new RequestSigner(secretA, { now: c.now }).sign(base);
    const v = new RequestVerifier({ secrets: [secretA], now: c.now });
    assert.equal(v.verify({ ...base, headers: { ...headers } }).ok, true);
  });

  test('the canonical string is the documented newline-joined list', () => {
    assert.equal(
      canonicalString({ ...base, method: 'post', ts: '17', nonce: 'ab'.repeat(16) }),
      ['viiwork-forward-v2', 'POST', '/v1/chat/completions?host=gpu2', '17', 'ab'.repeat(16), 'gpu1', 'gpu2', base.bodySha256].join('\n'),
    );
    const key = deriveSigningKey(secretA);
    const h = signRequest(key, { ...base, now: 17, nonce: 'ab'.repeat(16) });
    const expected = crypto.createHmac('sha256', key).update(canonicalString({ ...base, ts: '17', nonce: 'ab'.repeat(16) })).digest('hex');
    assert.equal(h['X-Viiwork-Auth'], `v2=${expected}`);
  });

  test('a forward signed for one member is refused by another (cross-member replay)', () => {
    const c = clock();
    const headers = lower(new RequestSigner(secretA, { now: c.now }).sign(base));
    const v = new RequestVerifier({ secrets: [secretA], now: c.now });
    assert.deepEqual(v.verify({ ...base, self: 'gpu3', headers }), { ok: false, reason: 'bad signature' });
    assert.equal(v.verify({ ...base, headers }).ok, true);
  });

  test('the receiver-less v1 is accepted only from a member whose version predates v2 (rolling upgrade)', () => {
    const c = clock();
    const v1 = lower(new RequestSigner(secretA, { now: c.now }).sign({ ...base, to: undefined }));
    assert.match(v1['x-viiwork-auth'], /^v1=/);
    const v = new RequestVerifier({ secrets: [secretA], now: c.now });
    assert.equal(v.verify({ ...base, headers: v1 }).ok, false);
    assert.equal(v.verify({ ...base, headers: v1, acceptV1: () => false }).ok, false);
    assert.equal(v.verify({ ...base, headers: v1, acceptV1: (n) => n === 'gpu1' }).ok, true);
    assert.equal(versionBefore('0.1.0', SIGNING_V2_SINCE), true);
    assert.equal(versionBefore('0.2.0', SIGNING_V2_SINCE), false);
    assert.equal(versionBefore('1.0.0', SIGNING_V2_SINCE), false);
    assert.equal(versionBefore(undefined, SIGNING_V2_SINCE), false);
  });

  test('the HMAC key is derived by HKDF and differs from the raw secret', () => {
    const key = deriveSigningKey(secretA);
    assert.equal(key.length, 32);
    assert.notDeepEqual(key, secretA);
    assert.notDeepEqual(deriveSigningKey(secretB), key);
    // A MAC made with the raw secret is refused.
    const c = clock();
    const forged = signRequest(secretA, { ...base, now: T0 });
    const v = new RequestVerifier({ secrets: [secretA], now: c.now });
    assert.deepEqual(v.verify({ ...base, headers: lower(forged) }), { ok: false, reason: 'bad signature' });
  });

  const tampers: [string, (i: { method: string; pathWithQuery: string; bodySha256: string; headers: Record<string, string> }) => void][] = [
    ['body', (i) => (i.bodySha256 = sha256Hex(Buffer.from('{"model":"other"}')))],
    ['method', (i) => (i.method = 'PUT')],
    ['path', (i) => (i.pathWithQuery = '/v1/chat/completions?host=gpu3')],
    ['node', (i) => (i.headers['x-viiwork-node'] = 'gpu9')],
    ['timestamp', (i) => (i.headers['x-viiwork-ts'] = String(T0 + 1))],
    ['nonce', (i) => (i.headers['x-viiwork-nonce'] = 'f'.repeat(32))],
  ];
  for (const [what, tamper] of tampers) {
    test(`a tampered ${what} is rejected with a reason`, () => {
      const c = clock();
      const v = new RequestVerifier({ secrets: [secretA], now: c.now });
      const input = { ...base, headers: lower(new RequestSigner(secretA, { now: c.now }).sign(base)) };
      tamper(input);
      const r = v.verify(input);
      assert.equal(r.ok, false);
      assert.equal(!r.ok && r.reason, 'bad signature');
    });
  }

  test('a replayed nonce is rejected', () => {
    const c = clock();
    const v = new RequestVerifier({ secrets: [secretA], now: c.now });
    const headers = lower(new RequestSigner(secretA, { now: c.now }).sign(base));
    assert.equal(v.verify({ ...base, headers }).ok, true);
    c.t += 1000;
    const again = v.verify({ ...base, headers });
    assert.equal(again.ok, false);
    assert.match(!again.ok ? again.reason : '', /replay/);
  });

  test('a timestamp 121 s off is rejected, 119 s off accepted, both directions', () => {
    for (const sign of [1, -1]) {
      const c = clock();
      const v = new RequestVerifier({ secrets: [secretA], now: c.now });
      const signer = new RequestSigner(secretA);
      const ok = v.verify({ ...base, headers: lower(signer.sign({ ...base, now: T0 + sign * 119_000 })) });
      assert.equal(ok.ok, true, `119 s ${sign > 0 ? 'ahead' : 'behind'}`);
      const bad = v.verify({ ...base, headers: lower(signer.sign({ ...base, now: T0 + sign * 121_000 })) });
      assert.equal(bad.ok, false, `121 s ${sign > 0 ? 'ahead' : 'behind'}`);
      assert.match(!bad.ok ? bad.reason : '', /timestamp .* off/);
    }
    assert.equal(MAX_SKEW_MS, 120_000);
  });

  test('a nonce is remembered for the whole window the timestamp stays valid', () => {
    const c = clock();
    const v = new RequestVerifier({ secrets: [secretA], now: c.now });
    // Signed 119 s in the future: stays acceptable until T0 + 239 s.
    const headers = lower(new RequestSigner(secretA).sign({ ...base, now: T0 + 119_000 }));
    assert.equal(v.verify({ ...base, headers }).ok, true);
    c.t = T0 + 238_000;
    assert.equal(v.verify({ ...base, headers }).ok, false);
  });

  test('partial header sets are classified and rejected', () => {
    const headers = lower(new RequestSigner(secretA).sign(base));
    assert.equal(classifyForwardHeaders({}), 'none');
    assert.equal(classifyForwardHeaders({ 'content-type': 'application/json', 'x-viiwork-prefer': 'a' }), 'none');
    assert.equal(classifyForwardHeaders(headers), 'complete');
    assert.equal(classifyForwardHeaders({ 'X-Viiwork-Node': 'gpu1' }), 'partial');
    const v = new RequestVerifier({ secrets: [secretA] });
    for (const drop of Object.keys(headers)) {
      const partial = { ...headers };
      delete partial[drop];
      assert.equal(classifyForwardHeaders(partial), 'partial', `without ${drop}`);
      const r = v.verify({ ...base, headers: partial });
      assert.equal(r.ok, false);
      assert.match(!r.ok ? r.reason : '', new RegExp(`missing ${drop}`));
    }
  });

  test('repeated or malformed headers are rejected', () => {
    const c = clock();
    const v = new RequestVerifier({ secrets: [secretA], now: c.now });
    const headers = lower(new RequestSigner(secretA, { now: c.now }).sign(base));
    const twice = { ...headers, 'x-viiwork-auth': [headers['x-viiwork-auth'], headers['x-viiwork-auth']] };
    assert.equal(v.verify({ ...base, headers: twice }).ok, false);
    assert.equal(v.verify({ ...base, headers: { ...headers, 'x-viiwork-ts': '1e12' } }).ok, false);
    assert.equal(v.verify({ ...base, headers: { ...headers, 'x-viiwork-auth': 'v2=' + 'a'.repeat(64) } }).ok, false);
    assert.equal(v.verify({ ...base, headers: { ...headers, 'x-viiwork-node': 'bad name' } }).ok, false);
  });

  test('rotation: signed with the previous secret, verified with [new, previous]', () => {
    const c = clock();
    const oldSigner = new RequestSigner(secretA, { now: c.now });
    const newSigner = new RequestSigner(secretB, { now: c.now });
    const rotating = new RequestVerifier({ secrets: [secretB, secretA], now: c.now });
    assert.equal(rotating.verify({ ...base, headers: lower(oldSigner.sign(base)) }).ok, true);
    assert.equal(rotating.verify({ ...base, headers: lower(newSigner.sign(base)) }).ok, true);
    const newOnly = new RequestVerifier({ secrets: [secretB], now: c.now });
    assert.equal(newOnly.verify({ ...base, headers: lower(oldSigner.sign(base)) }).ok, false);
  });

  test('the nonce cache stays bounded and never lets a forgotten nonce be replayed', () => {
    const c = clock();
    const v = new RequestVerifier({ secrets: [secretA], now: c.now, maxNonces: 100 });
    const signer = new RequestSigner(secretA, { now: c.now });
    const first = lower(signer.sign(base));
    assert.equal(v.verify({ ...base, headers: first }).ok, true);
    for (let i = 0; i < 500; i++) {
      c.t += 1;
      assert.equal(v.verify({ ...base, headers: lower(signer.sign(base)) }).ok, true);
      assert.ok(v.nonceCount <= 100);
    }
    assert.equal(v.nonceCount, 100);
    const replay = v.verify({ ...base, headers: first });
    assert.equal(replay.ok, false);
    // Entries expire with time, too.
    c.t += 241_000;
    assert.equal(v.verify({ ...base, headers: lower(signer.sign(base)) }).ok, true);
    assert.equal(v.nonceCount, 1);
  });

  test('body hashing can be streamed', async () => {
    const hasher = new HashingPassThrough();
    const chunks: Buffer[] = [];
    await pipeline(
      Readable.from([body.subarray(0, 5), body.subarray(5)]),
      hasher,
      new Writable({
        write(chunk, _e, cb) {
          chunks.push(chunk);
          cb();
        },
      }),
    );
    assert.equal(hasher.digestHex(), sha256Hex(body));
    assert.deepEqual(Buffer.concat(chunks), body);
    assert.equal(EMPTY_BODY_SHA256, sha256Hex(Buffer.alloc(0)));
  });
});

describe('stripping mesh headers', () => {
  test('every x-viiwork-* request header but x-viiwork-prefer is removed, in any case', () => {
    const headers: Record<string, string | undefined> = {
      'content-type': 'application/json',
      'x-viiwork-node': 'gpu1',
      'X-Viiwork-Auth': 'v1=00',
      'x-viiwork-ts': '1',
      'x-viiwork-nonce': 'a',
      'X-VIIWORK-ORIGIN': 'x',
      'x-viiwork-prefer': 'gpu2,gpu3',
      'x-session-id': 's',
      'x-viiwork': 'not a mesh name (no dash after the prefix)',
    };
    removeMeshHeaders(headers);
    const left = Object.fromEntries(Object.entries(headers).filter(([, v]) => v !== undefined));
    assert.deepEqual(left, { 'content-type': 'application/json', 'x-viiwork-prefer': 'gpu2,gpu3', 'x-session-id': 's', 'x-viiwork': 'not a mesh name (no dash after the prefix)' });
  });
});
