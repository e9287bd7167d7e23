import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { describe, test } from 'node:test';
import { chainClaim, chainOfClaim, CHAIN_CLAIM_MAX } from '../../src/prompt/chain-claim.ts';
import { CLAIMS_MAX_BYTES, decodeClaims, encodeClaims } from '../../src/security/claims.ts';
import { memberHeaders } from '../../src/security/headers.ts';
import { loadMeshMode } from '../../src/security/secret.ts';
import { canonicalString, deriveSigningKey, RequestSigner, RequestVerifier, sha256Hex, signRequest } from '../../src/security/signing.ts';

const T0 = 1_764_441_600_123;
const secret = Buffer.alloc(32, 0xc3);
const base = { method: 'POST', pathWithQuery: '/v1/chat/completions', node: 'gpu1', to: 'gpu2', bodySha256: sha256Hex('{}') };
const lower = (h: object) => Object.fromEntries(Object.entries(h).map(([k, v]) => [k.toLowerCase(), v as string]));

describe('claims: the wire form', () => {
  test('round trip, undefined values left out, none at all is no header', () => {
    const text = encodeClaims({ chain: '0123456789abcdef:12', key: 'alice', trace: undefined });
    assert.equal(text, 'chain=0123456789abcdef:12;key=alice');
    assert.deepEqual([...(decodeClaims(text) as Map<string, string>)], [['chain', '0123456789abcdef:12'], ['key', 'alice']]);
    assert.equal(encodeClaims({ chain: undefined }), undefined);
    assert.equal((decodeClaims(undefined) as Map<string, string>).size, 0);
    assert.equal(decodeClaims('a=1=2').constructor, Map, "a value may hold '='");
  });

  test('malformed headers are named, never half-read', () => {
    for (const bad of ['chain', 'Chain=1', 'a=1;;b=2', '=1', 'a=x y', 'a=é'])
      assert.match(decodeClaims(bad) as string, /malformed X-Viiwork-Claims/, bad);
    assert.match(decodeClaims('a=1;a=2') as string, /twice/);
    assert.match(decodeClaims('a=' + 'x'.repeat(CLAIMS_MAX_BYTES)) as string, /longer than/);
  });

  test('a claim that cannot be carried is a programming error, not a silent drop', () => {
    assert.throws(() => encodeClaims({ key: 'a;b' }), /cannot be carried/);
    assert.throws(() => encodeClaims({ Key: 'a' }), /cannot be carried/);
    assert.throws(() => encodeClaims({ big: 'x'.repeat(CLAIMS_MAX_BYTES + 1) }), /exceed/);
  });
});

describe('the chain claim', () => {
  const chain = [
    { hash: '0123456789abcdef', tokens: 40 },
    { hash: 'fedcba9876543210', tokens: 55 },
  ];

  test('round trip', () => {
    assert.equal(chainClaim(chain), '0123456789abcdef:40,fedcba9876543210:55');
    assert.deepEqual(chainOfClaim(chainClaim(chain)), chain);
    assert.equal(chainClaim([]), undefined);
  });

  test('too long to carry: left out (the executor walks the body)', () => {
    const long = Array.from({ length: 400 }, (_, i) => ({ hash: i.toString(16).padStart(16, '0'), tokens: i * 10 }));
    assert.equal(chainClaim(long), undefined);
    assert.ok(400 * 20 > CHAIN_CLAIM_MAX);
  });

  test('malformed or not a chain this code made: undefined', () => {
    for (const bad of ['', 'xyz', '0123456789abcdef', '0123456789ABCDEF:1', '0123456789abcdef:5,fedcba9876543210:4', '0123456789abcdef:-1'])
      assert.equal(chainOfClaim(bad), undefined, bad);
  });
});

describe('signature v3', () => {
  test('the canonical string is v2 with the claims line appended, under its own tag', () => {
    const claims = 'chain=0123456789abcdef:1';
    const v3 = canonicalString({ ...base, ts: '17', nonce: 'ab'.repeat(16), claims });
    const v2 = canonicalString({ ...base, ts: '17', nonce: 'ab'.repeat(16) });
    assert.equal(v3, ['viiwork-forward-v3', ...v2.split('\n').slice(1), claims].join('\n'));
    const h = signRequest(deriveSigningKey(secret), { ...base, claims, now: 17, nonce: 'ab'.repeat(16) });
    assert.match(h['X-Viiwork-Auth'], /^v3=[0-9a-f]{64}$/);
    assert.equal(h['X-Viiwork-Claims'], claims);
    assert.match(signRequest(deriveSigningKey(secret), { ...base, now: 17 })['X-Viiwork-Auth'], /^v2=/, 'no claims: still v2');
  });

  test('the verifier returns the claims it vouched for; without claims a v2 forward verifies as before', () => {
    const now = () => T0;
    const v = new RequestVerifier({ secrets: [secret], now });
    const s = new RequestSigner(secret, { now });
    const withClaims = lower(s.sign({ ...base, claims: 'key=alice' }));
    assert.deepEqual(v.verify({ ...base, headers: withClaims, self: 'gpu2' }), { ok: true, node: 'gpu1', ts: T0, claims: 'key=alice' });
    assert.deepEqual(v.verify({ ...base, headers: lower(s.sign(base)), self: 'gpu2' }), { ok: true, node: 'gpu1', ts: T0 });
  });

  test('claims cannot be added to a v2 forward, altered, dropped from a v3 one, or repeated', () => {
    const now = () => T0;
    const v = new RequestVerifier({ secrets: [secret], now });
    const s = new RequestSigner(secret, { now });
    const added = { ...lower(s.sign(base)), 'x-viiwork-claims': 'key=root' };
    assert.match((v.verify({ ...base, headers: added, self: 'gpu2' }) as { reason: string }).reason, /outside the signature/);
    const altered = { ...lower(s.sign({ ...base, claims: 'key=alice' })), 'x-viiwork-claims': 'key=root' };
    assert.equal((v.verify({ ...base, headers: altered, self: 'gpu2' }) as { reason: string }).reason, 'bad signature');
    const dropped = lower(s.sign({ ...base, claims: 'key=alice' }));
    delete dropped['x-viiwork-claims'];
    assert.equal((v.verify({ ...base, headers: dropped, self: 'gpu2' }) as { reason: string }).reason, 'bad signature');
    const twice = { ...lower(s.sign({ ...base, claims: 'key=alice' })), 'x-viiwork-claims': ['key=alice', 'key=alice'] };
    assert.equal(v.verify({ ...base, headers: twice as never, self: 'gpu2' }).ok, false);
  });

  test('memberHeaders: signed v3 with claims in a secured mesh, the claims beside the name in an open one', () => {
    const secured = loadMeshMode({ VIIWORK_MESH_SECRET: crypto.randomBytes(32).toString('base64') }, false);
    const h = memberHeaders(secured, 'gpu1', 'POST', '/v1/chat/completions', base.bodySha256, 'gpu2', 'key=alice');
    assert.match(h['X-Viiwork-Auth'], /^v3=/);
    assert.equal(h['X-Viiwork-Claims'], 'key=alice');
    const open = memberHeaders(loadMeshMode({}, true), 'gpu1', 'POST', '/v1/chat/completions', '', 'gpu2', 'key=alice');
    assert.deepEqual(open, { 'x-viiwork-node': 'gpu1', 'x-viiwork-claims': 'key=alice' });
  });
});
