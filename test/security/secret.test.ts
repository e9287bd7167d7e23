import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { MeshModeError, loadMeshMode, newSecret, parseSecret, scrubEnv } from '../../src/security/secret.ts';

const good = Buffer.alloc(32, 7).toString('base64');
const good2 = Buffer.alloc(32, 9).toString('base64');

describe('mesh mode', () => {
  test('a secret and mesh.open false make a secured mesh', () => {
    const m = loadMeshMode({ VIIWORK_MESH_SECRET: good }, false);
    assert.equal(m.mode, 'secured');
    assert.ok(m.mode === 'secured');
    assert.deepEqual(m.keys, [Buffer.alloc(32, 7)]);
    const headers = m.signer.sign({ method: 'GET', pathWithQuery: '/x', node: 'a', to: 'b', bodySha256: '0'.repeat(64) });
    assert.equal(
      m.verifier.verify({
        method: 'GET',
        pathWithQuery: '/x',
        bodySha256: '0'.repeat(64),
        self: 'b',
        headers: Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v])),
      }).ok,
      true,
    );
  });

  test('during rotation the keyring holds the primary first, then the previous', () => {
    const m = loadMeshMode({ VIIWORK_MESH_SECRET: good, VIIWORK_MESH_SECRET_PREV: good2 }, false);
    assert.ok(m.mode === 'secured');
    assert.deepEqual(m.keys, [Buffer.alloc(32, 7), Buffer.alloc(32, 9)]);
  });

  test('mesh.open true without a secret makes an open mesh', () => {
    assert.deepEqual(loadMeshMode({}, true), { mode: 'open' });
  });

  test('neither mode is refused, naming VIIWORK_MESH_SECRET and mesh.open and the fix', () => {
    assert.throws(
      () => loadMeshMode({}, false),
      (e: Error) =>
        e instanceof MeshModeError &&
        e.message.includes('VIIWORK_MESH_SECRET') &&
        e.message.includes('mesh.open') &&
        e.message.includes('viiwork secret'),
    );
  });

  test('both modes are refused, naming VIIWORK_MESH_SECRET and mesh.open', () => {
    assert.throws(
      () => loadMeshMode({ VIIWORK_MESH_SECRET: good }, true),
      (e: Error) => e instanceof MeshModeError && e.message.includes('VIIWORK_MESH_SECRET') && e.message.includes('mesh.open'),
    );
  });

  test('a previous secret without a primary is refused', () => {
    assert.throws(() => loadMeshMode({ VIIWORK_MESH_SECRET_PREV: good }, false), /VIIWORK_MESH_SECRET_PREV is set without VIIWORK_MESH_SECRET/);
    assert.throws(() => loadMeshMode({ VIIWORK_MESH_SECRET_PREV: good }, true), /VIIWORK_MESH_SECRET_PREV/);
  });

  const badValues: [string, string][] = [
    ['', /empty/.source],
    ['not base64!', /not valid base64/.source],
    [Buffer.alloc(16).toString('base64'), /decodes to 16 bytes/.source],
    [Buffer.alloc(33).toString('base64'), /decodes to 33 bytes/.source],
    [good.slice(0, -2) + 'B=', /not valid base64/.source],
  ];
  for (const [value, why] of badValues) {
    test(`a bad secret ${JSON.stringify(value)} is refused naming the variable and the format`, () => {
      for (const variable of ['VIIWORK_MESH_SECRET', 'VIIWORK_MESH_SECRET_PREV']) {
        const env = variable === 'VIIWORK_MESH_SECRET' ? { VIIWORK_MESH_SECRET: value } : { VIIWORK_MESH_SECRET: good, VIIWORK_MESH_SECRET_PREV: value };
        assert.throws(
          () => loadMeshMode(env, false),
          (e: Error) =>
            e instanceof MeshModeError &&
            e.message.startsWith(`${variable} `) &&
            new RegExp(why).test(e.message) &&
            e.message.includes('base64 of exactly 32'),
        );
      }
    });
  }

  test('padding may be left off and whitespace around the value is ignored', () => {
    assert.deepEqual(parseSecret(` ${good.replace(/=+$/, '')}\n`, 'X'), Buffer.alloc(32, 7));
  });

  test('newSecret prints 32 random bytes in base64 that load back', () => {
    const a = newSecret();
    assert.equal(Buffer.from(a, 'base64').length, 32);
    assert.notEqual(a, newSecret());
    assert.equal(loadMeshMode({ VIIWORK_MESH_SECRET: a }, false).mode, 'secured');
  });

  test('scrubEnv removes the secret variables and keeps the rest', () => {
    const env = { PATH: '/bin', VIIWORK_MESH_SECRET: good, VIIWORK_MESH_SECRET_PREV: good2, VIIWORK_DEBUG: '1' };
    assert.deepEqual(scrubEnv(env), { PATH: '/bin', VIIWORK_DEBUG: '1' });
    assert.equal(env.VIIWORK_MESH_SECRET, good, 'the input is not modified');
  });
});
