/** Roles and scopes (SPEC section 12): the role table, the presented key, the caller, priorities. */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { describe, it } from 'node:test';
import { allowsModel, effectivePriority, identify, Keyring, needOf, presentedKey, reaches, type Caller } from '../../src/keys/access.ts';
import { KeyTable } from '../../src/keys/table.ts';

const sha = (s: string) => crypto.createHash('sha256').update(s).digest('hex');

describe('the role table (docs/api.md)', () => {
  const table: [string, string, boolean, string][] = [
    ['POST', '/v1/chat/completions', false, 'user'],
    ['POST', '/v1/messages', false, 'user'],
    ['POST', '/v1/responses', false, 'user'],
    ['GET', '/v1/models', false, 'user'],
    ['GET', '/v1/models/qwen', false, 'user'],
    ['POST', '/v1/models/qwen/load', false, 'admin'],
    ['POST', '/v1/models/qwen/unload', false, 'admin'],
    ['GET', '/v1/aliases', false, 'user'],
    ['PUT', '/v1/aliases/fast', false, 'admin'],
    ['DELETE', '/v1/aliases/fast', false, 'admin'],
    ['POST', '/v1/aliases/fast/revert', false, 'admin'],
    ['GET', '/v1/keys', false, 'admin'],
    ['POST', '/v1/keys', false, 'admin'],
    ['PATCH', '/v1/keys/alice', false, 'admin'],
    ['DELETE', '/v1/keys/alice', false, 'admin'],
    ['GET', '/v1/decisions', false, 'admin'],
    ['GET', '/v1/fleet/capacity', false, 'admin'],
    ['GET', '/v1/mesh', false, 'admin'],
    ['GET', '/v1/history', false, 'admin'],
    ['GET', '/v1/timeline/n1:3', false, 'admin'],
    ['GET', '/v1/usage', false, 'user'],
    ['GET', '/v1/capacity', true, 'open'],
    ['GET', '/health', false, 'open'],
    ['GET', '/health', true, 'user'],
    ['GET', '/metrics', false, 'open'],
    ['GET', '/', false, 'open'],
    ['GET', '/nowhere', false, 'user'],
  ];
  for (const [method, p, protect, need] of table) it(`${method} ${p}${protect ? ' (protect_ops)' : ''} needs ${need}`, () => assert.equal(needOf(method, p, protect), need));

  it('a user key reaches user endpoints only; an admin key reaches all', () => {
    const user = { role: 'user' } as Caller;
    const admin = { role: 'admin' } as Caller;
    assert.deepEqual([reaches(user, 'user'), reaches(user, 'admin'), reaches(admin, 'admin'), reaches(user, 'open')], [true, false, true, true]);
  });
});

describe('the presented key', () => {
  it('Bearer in any case, one space; x-api-key only where asked', () => {
    assert.equal(presentedKey({ authorization: 'Bearer k1' }, false), 'k1');
    assert.equal(presentedKey({ authorization: 'bearer k1' }, false), 'k1');
    assert.equal(presentedKey({ authorization: 'BEARER k1' }, false), 'k1');
    assert.equal(presentedKey({ authorization: 'Bearer  k1' }, false), undefined);
    assert.equal(presentedKey({ authorization: 'Bearer k1 x' }, false), undefined);
    assert.equal(presentedKey({ authorization: 'Basic k1' }, false), undefined);
    assert.equal(presentedKey({ 'x-api-key': 'k2' }, false), undefined);
    assert.equal(presentedKey({ 'x-api-key': 'k2' }, true), 'k2');
  });

  it('a table key, a plain key (admin, named local), or nobody', () => {
    const t = new KeyTable();
    t.add({ name: 'alice', sha256: sha('s-alice'), role: 'user', models: ['qwen*'], priority: 'batch', weight: 2, limits: { rpm: 3 } }, 'n1');
    assert.deepEqual(identify('s-alice', t, new Set()), { name: 'alice', role: 'user', models: ['qwen*'], priority: 'batch', weight: 2, limits: { rpm: 3 } });
    assert.equal(identify('plain', t, new Set([sha('plain')]))?.name, 'local');
    assert.equal(identify('plain', t, new Set([sha('plain')]))?.role, 'admin');
    assert.equal(identify('wrong', t, new Set([sha('plain')])), undefined);
    assert.equal(identify(undefined, t, new Set()), undefined);
  });

  it('a keyring is off with neither plain keys nor table keys, and a revoked key is off everywhere it is asked', () => {
    const t = new KeyTable();
    const ring = new Keyring(t, []);
    assert.equal(ring.enabled, false);
    t.add({ name: 'bob', sha256: sha('s-bob'), role: 'user', models: ['*'], priority: 'interactive', weight: 1, limits: {} }, 'n1');
    assert.equal(ring.enabled, true);
    assert.equal(ring.caller({ authorization: 'Bearer s-bob' }, false)?.name, 'bob');
    assert.equal((ring.named('bob') as Caller).name, 'bob');
    assert.equal((ring.named('new-elsewhere') as Caller).name, 'new-elsewhere', 'a name not heard of yet is the entry’s word');
    t.remove('bob', 'n1');
    assert.equal(ring.caller({ authorization: 'Bearer s-bob' }, false), undefined);
    assert.equal(ring.named('bob'), 'revoked');
  });
});

describe('scopes and priority', () => {
  it('models by glob', () => {
    const c = { models: ['qwen*', 'bge-m3'] };
    assert.deepEqual(['qwen-7b', 'bge-m3', 'llama'].map((m) => allowsModel(c, m)), [true, true, false]);
  });
  it('a request may lower its priority, never raise it above its key', () => {
    const batchKey = { priority: 'batch' } as Caller;
    const interKey = { priority: 'interactive' } as Caller;
    assert.equal(effectivePriority(batchKey, 'interactive'), 'batch');
    assert.equal(effectivePriority(interKey, 'batch'), 'batch');
    assert.equal(effectivePriority(interKey, undefined), 'interactive');
    assert.equal(effectivePriority(undefined, undefined), 'interactive');
    assert.equal(effectivePriority(undefined, 'batch'), 'batch');
  });
});
