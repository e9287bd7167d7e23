/**
 * Who may drain a node (SPEC sections 12 and 13): with keys on, `viiwork
 * drain` needs an admin key (a user key is refused, naming why); with the
 * admin key it drains the node, waits for it to exit, and says so.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startMeshNode, stopAll, type MeshNode } from '../helpers/mesh.ts';
import { tempDir } from '../helpers/node.ts';

const BIN = path.resolve('bin/viiwork.js');
const ADMIN = 'admin-key-for-drain-tests';
const USER = 'user-key-for-drain-tests';
const sha = (k: string) => crypto.createHash('sha256').update(k).digest('hex');

function drain(url: string, key: string | undefined): Promise<{ code: number | null; out: string }> {
  const env = { ...process.env };
  delete env.VIIWORK_API_KEY;
  if (key) env.VIIWORK_API_KEY = key;
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [BIN, 'drain', '--url', url], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (out += d));
    p.on('exit', (code) => resolve({ code, out }));
  });
}

describe('viiwork drain with keys on', () => {
  let n: MeshNode;
  before(async () => {
    const keys = path.join(tempDir('viiwork-drain-keys-'), 'keys.yaml');
    fs.writeFileSync(keys, `keys:\n  - name: ops\n    sha256: ${sha(ADMIN)}\n    role: admin\n  - name: alice\n    sha256: ${sha(USER)}\n    role: user\n`, { mode: 0o600 });
    n = await startMeshNode({ name: 'D', ip: '127.0.204.1', api: { keys_file: keys }, models: [{ name: 'm', engine: 'sim', parallel: 1 }] });
  });
  after(() => stopAll([n]));

  it('is refused without a key and with a user key, and drains the node with an admin key', async () => {
    const none = await drain(n.url, undefined);
    assert.equal(none.code, 1);
    assert.match(none.out, /needs an API key/);
    const user = await drain(n.url, USER);
    assert.equal(user.code, 1);
    assert.match(user.out, /insufficient_scope: key "alice" has role user/);
    const admin = await drain(n.url, ADMIN);
    assert.equal(admin.code, 0, admin.out);
    assert.match(admin.out, /D: draining/);
    assert.match(admin.out, /D: drained and stopped/);
    assert.equal(await n.exited, 0, n.logs());
    assert.match(n.logs(), /draining \(asked through \/v1\/drain/);
  });
});
