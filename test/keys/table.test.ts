/** The key table (SPEC section 12): validation of entries, the keys file, Lamport merging, revocation, persistence, gossip codec. */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { checkKeyFields, globMatch, type KeySpec } from '../../src/config/key-spec.ts';
import { parseKeyTable, readClientKeys } from '../../src/config/keys.ts';
import { decodeKeys, encodeKeyChange, encodeKeyTable } from '../../src/keys/codec.ts';
import { KeyTable } from '../../src/keys/table.ts';
import { KeyError, type KeyEntry } from '../../src/keys/types.ts';
import { encodeUserState, userStateParts } from '../../src/mesh/user-state.ts';
import { encodeTable } from '../../src/aliases/codec.ts';

const sha = (s: string) => crypto.createHash('sha256').update(s).digest('hex');
const spec = (name: string, over: Partial<KeySpec> = {}): KeySpec => ({ name, sha256: sha(`secret-${name}`), role: 'user', models: ['*'], priority: 'interactive', weight: 1, limits: {}, ...over });
const tempDir = () => fs.mkdtempSync(path.join(os.tmpdir(), 'viiwork-keys-'));

describe('keys file: every bad entry is named by its path, and nothing loads', () => {
  const good = { name: 'alice', sha256: sha('a'), role: 'user', models: ['qwen*'], priority: 'interactive', weight: 1, limits: { rpm: 120, tpm: 400000 } };
  const cases: [string, unknown, string, RegExp][] = [
    ['an unknown field', { keys: [{ ...good, colour: 'red' }] }, 'keys[0].colour', /unknown field "colour"/],
    ['an unknown limit', { keys: [{ ...good, limits: { rph: 3 } }] }, 'keys[0].limits.rph', /unknown limit/],
    ['a duplicate name', { keys: [good, { ...good, sha256: sha('b') }] }, 'keys[1].name', /duplicate name "alice"/],
    ['a malformed hash', { keys: [{ ...good, sha256: 'abc' }] }, 'keys[0].sha256', /malformed hash/],
    ['a missing hash', { keys: [{ name: 'bob' }] }, 'keys[0].sha256', /needs "sha256"/],
    ['a limit of 0', { keys: [{ ...good, limits: { tpm: 0 } }] }, 'keys[0].limits.tpm', /above 0/],
    ['a negative limit', { keys: [{ ...good, limits: { concurrent: -2 } }] }, 'keys[0].limits.concurrent', /above 0/],
    ['a fractional limit', { keys: [{ ...good, limits: { rpm: 1.5 } }] }, 'keys[0].limits.rpm', /whole number/],
    ['an unknown role', { keys: [{ ...good, role: 'root' }] }, 'keys[0].role', /unknown role "root"/],
    ['an unknown priority', { keys: [{ ...good, priority: 'urgent' }] }, 'keys[0].priority', /unknown priority/],
    ['a weight of 0', { keys: [{ ...good, weight: 0 }] }, 'keys[0].weight', /above 0/],
    ['a bad name', { keys: [{ ...good, name: 'a b' }] }, 'keys[0].name', /not a key name/],
    ['a reserved name', { keys: [{ ...good, name: 'local' }] }, 'keys[0].name', /reserved/],
    ['an empty models list', { keys: [{ ...good, models: [] }] }, 'keys[0].models', /list of 1 to/],
    ['one secret under two names', { keys: [good, { ...good, name: 'alice2' }] }, 'keys[1].sha256', /same hash/],
    ['a stray top-level field', { keys: [good], users: [] }, 'users', /unknown field "users"/],
    ['keys that is not a list', { keys: { alice: good } }, 'keys', /must be a list/],
  ];
  for (const [what, doc, where, message] of cases) {
    it(`refuses ${what} at ${where}`, () => {
      const r = parseKeyTable(doc);
      assert.deepEqual(r.entries.length === 0 || r.problems.length > 0, true);
      const p = r.problems.find((x) => x.path === where);
      assert.ok(p, `a problem at ${where}: ${JSON.stringify(r.problems)}`);
      assert.match(p.message, message);
    });
  }

  it('reads a YAML table with defaults, and the one-key-a-line file as plain (admin) keys', () => {
    const dir = tempDir();
    const yaml = path.join(dir, 'keys.yaml');
    fs.writeFileSync(yaml, `keys:\n  - name: alice\n    sha256: ${sha('a').toUpperCase()}\n    models: ["qwen*", bge-m3]\n    limits: {rpm: 120}\n  - name: ops\n    sha256: ${sha('o')}\n    role: admin\n`);
    const t = readClientKeys({ keys_env: '', keys_file: yaml }, {});
    assert.deepEqual(t.problems, []);
    assert.deepEqual(t.keys, []);
    assert.deepEqual(t.table, [
      { name: 'alice', sha256: sha('a'), models: ['qwen*', 'bge-m3'], limits: { rpm: 120 }, role: 'user', priority: 'interactive', weight: 1 },
      { name: 'ops', sha256: sha('o'), role: 'admin', models: ['*'], priority: 'interactive', weight: 1, limits: {} },
    ]);
    const plain = path.join(dir, 'plain');
    fs.writeFileSync(plain, '# keys\nk-0123456789abcdef\n');
    const p = readClientKeys({ keys_env: '', keys_file: plain }, {});
    assert.deepEqual([p.keys, p.table, p.problems], [['k-0123456789abcdef'], [], []]);
  });

  it('a bad table in a file is a problem of api.keys_file naming the field, and loads no entry', () => {
    const dir = tempDir();
    const yaml = path.join(dir, 'keys.yaml');
    fs.writeFileSync(yaml, `keys:\n  - name: alice\n    sha256: ${sha('a')}\n  - name: bob\n    sha256: ${sha('b')}\n    limits: {tpm: -1}\n`);
    const t = readClientKeys({ keys_env: '', keys_file: yaml }, {});
    assert.deepEqual(t.table, []);
    assert.deepEqual(t.problems.map((p) => p.key), ['api.keys_file: keys[1].limits.tpm']);
  });
});

describe('key globs', () => {
  const table: [string, string, boolean][] = [
    ['*', 'anything', true],
    ['qwen*', 'qwen2.5-7b', true],
    ['qwen*', 'xqwen', false],
    ['bge-m3', 'bge-m3', true],
    ['bge-m3', 'bge-m3x', false],
    ['q?en', 'qwen', true],
    ['a.b', 'axb', false],
    ['org/*', 'org/model', true],
  ];
  for (const [glob, name, want] of table) it(`${glob} ${want ? 'matches' : 'does not match'} ${name}`, () => assert.equal(globMatch(glob, name), want));
});

describe('key table', () => {
  it('add, patch and revoke take Lamport versions; a revoked key is found by neither name nor hash', () => {
    const t = new KeyTable();
    const a = t.add(spec('alice'), 'n1');
    assert.equal(a.version, 1);
    assert.equal(t.byHash(sha('secret-alice'))?.name, 'alice');
    const p = t.patch('alice', { role: 'admin', limits: { tpm: 100 } }, 'n1');
    assert.equal(p.version, 2);
    assert.deepEqual([t.get('alice')?.role, t.get('alice')?.limits], ['admin', { tpm: 100 }]);
    t.patch('alice', { limits: { tpm: null, rpm: 5 } }, 'n1');
    assert.deepEqual(t.get('alice')?.limits, { rpm: 5 });
    t.remove('alice', 'n1');
    assert.equal(t.get('alice'), undefined);
    assert.equal(t.byHash(sha('secret-alice')), undefined);
    assert.equal(t.size, 0);
    assert.equal(t.empty, false, 'the tombstone stays');
  });

  it('refuses a second key of the same name or secret, a patch with bad fields, and unknown names', () => {
    const t = new KeyTable();
    t.add(spec('alice'), 'n1');
    assert.throws(() => t.add(spec('alice', { sha256: sha('x') }), 'n1'), (e: KeyError) => e.code === 'exists');
    assert.throws(() => t.add(spec('bob', { sha256: sha('secret-alice') }), 'n1'), (e: KeyError) => e.code === 'exists');
    assert.throws(() => t.patch('alice', { role: 'root' }, 'n1'), (e: KeyError) => e.code === 'invalid' && /role/.test(e.message));
    assert.throws(() => t.patch('alice', { limits: { tpm: 0 } }, 'n1'), (e: KeyError) => e.code === 'invalid');
    assert.throws(() => t.patch('nobody', {}, 'n1'), (e: KeyError) => e.code === 'not_found');
    assert.throws(() => t.remove('nobody', 'n1'), (e: KeyError) => e.code === 'not_found');
    assert.equal(t.version, 1, 'nothing changed');
  });

  it('merging is order-independent: a revocation wins over the set it follows, whatever arrives first', () => {
    const { name: _name, ...value } = spec('bob');
    const set: KeyEntry = { name: 'bob', version: 3, writer: 'n2', at: 1, value };
    const rm: KeyEntry = { name: 'bob', version: 4, writer: 'n3', at: 2, value: null };
    for (const order of [[set, rm], [rm, set]]) {
      const t = new KeyTable();
      for (const e of order) t.merge([e]);
      assert.equal(t.get('bob'), undefined);
      assert.equal(t.version, 4);
    }
  });

  it('a keys file seeds only names the mesh has never seen: a revoked key stays revoked after a restart', () => {
    const dir = tempDir();
    const t = KeyTable.load(dir);
    t.seed([spec('alice')]);
    assert.equal(t.get('alice')?.version, 0);
    t.remove('alice', 'n1');
    const again = KeyTable.load(dir);
    again.seed([spec('alice')]);
    assert.equal(again.get('alice'), undefined);
    assert.equal(again.version, 1);
    assert.equal(fs.statSync(path.join(dir, 'keys.json')).mode & 0o077, 0, 'the state file is private');
    assert.ok(!fs.readFileSync(path.join(dir, 'keys.json'), 'utf8').includes('secret-alice'));
  });

  it('ignores malformed gossip entries and keeps the good ones of a table', () => {
    const t = new KeyTable();
    const good = { name: 'carol', version: 2, writer: 'n1', at: 5, value: { sha256: sha('c'), role: 'user', models: ['*'], priority: 'batch', weight: 2, limits: { rpm: 3 } } };
    const bad = [{ ...good, name: 'x y' }, { ...good, value: { ...good.value, role: 'god' } }, { ...good, version: -1 }, 'junk', null];
    const d = decodeKeys(encodeKeyTable([...bad, good] as KeyEntry[]));
    assert.equal(d?.kind, 'table');
    t.merge(d!.kind === 'table' ? d!.entries : []);
    assert.deepEqual(t.list().map((k) => [k.name, k.priority, k.weight]), [['carol', 'batch', 2]]);
    assert.equal(decodeKeys(Buffer.from('{"x":1}')), undefined);
    assert.equal(decodeKeys(encodeTable([])), undefined, 'an alias table is not a key message');
    const one = decodeKeys(encodeKeyChange(good as KeyEntry));
    assert.equal(one?.kind, 'change');
  });

  it('refuses a change too large for one gossip packet', () => {
    const t = new KeyTable();
    const models = Array.from({ length: 32 }, (_, i) => `${'m'.repeat(100)}${i}`);
    assert.throws(() => t.add(spec('wide', { models }), 'n1'), (e: KeyError) => e.code === 'too_large');
  });
});

describe('push-pull user state', () => {
  it('is the alias table alone, as before keys, while the key table is empty', () => {
    const aliases = encodeTable([]);
    assert.deepEqual(encodeUserState([aliases, undefined]), aliases);
    assert.deepEqual(userStateParts(aliases).map((b) => Buffer.from(b)), [aliases]);
  });
  it('bundles both tables and splits them again; a cut bundle keeps the whole parts', () => {
    const aliases = encodeTable([]);
    const keys = encodeKeyTable([]);
    const both = encodeUserState([aliases, keys]);
    assert.deepEqual(userStateParts(both).map((b) => Buffer.from(b)), [aliases, keys]);
    assert.deepEqual(userStateParts(both.subarray(0, both.length - 1)).map((b) => Buffer.from(b)), [aliases]);
  });
});

describe('checkKeyFields', () => {
  it('fills defaults for a full entry and none for a PATCH', () => {
    assert.deepEqual(checkKeyFields({ sha256: sha('z') }).value, { sha256: sha('z'), role: 'user', models: ['*'], priority: 'interactive', weight: 1, limits: {} });
    assert.deepEqual(checkKeyFields({ weight: 3 }, { partial: true }).value, { weight: 3 });
  });
});
