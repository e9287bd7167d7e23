/** `viiwork check` on a keys file (SPEC section 12): each bad entry is an error naming api.keys_file and the field's path. */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { stringify } from 'yaml';
import { tempDir } from '../helpers/node.ts';

const run = promisify(execFile);
const BIN = path.resolve('bin/viiwork.js');
const sha = (s: string) => crypto.createHash('sha256').update(s).digest('hex');

function configWith(keysYaml: string): string {
  const dir = tempDir('viiwork-keycheck-');
  const keys = path.join(dir, 'keys.yaml');
  fs.writeFileSync(keys, keysYaml, { mode: 0o600 });
  const file = path.join(dir, 'viiwork.yaml');
  fs.writeFileSync(
    file,
    stringify({
      node: { name: 'checked', state_dir: path.join(dir, 'state') },
      api: { host: '127.0.0.1', port: 0, keys_file: keys },
      mesh: { open: true, network: 'lan', mdns: false, advertise: '127.0.0.1', port: 0 },
      models: [{ name: 'sim-chat', engine: 'sim', parallel: 2 }],
    }),
  );
  return file;
}

async function check(file: string): Promise<{ code: number; findings: { level: string; key: string; message: string }[] }> {
  const env = { ...process.env };
  for (const k of Object.keys(env)) if (k.startsWith('VIIWORK_')) delete env[k];
  try {
    const r = await run(process.execPath, [BIN, 'check', '--config', file, '--json', '--no-ports'], { env });
    return { code: 0, ...JSON.parse(r.stdout) };
  } catch (err) {
    const e = err as { code: number; stdout: string };
    return { code: e.code, ...JSON.parse(e.stdout) };
  }
}

describe('viiwork check on a keys file', () => {
  it('passes a valid table', async () => {
    const r = await check(configWith(`keys:\n  - name: alice\n    sha256: ${sha('a')}\n    limits: {tpm: 60000}\n`));
    assert.equal(r.code, 0, JSON.stringify(r.findings));
  });

  const bad: [string, string, string][] = [
    ['an unknown field', `keys:\n  - name: alice\n    sha256: ${sha('a')}\n    team: x\n`, 'api.keys_file: keys[0].team'],
    ['a duplicate name', `keys:\n  - name: alice\n    sha256: ${sha('a')}\n  - name: alice\n    sha256: ${sha('b')}\n`, 'api.keys_file: keys[1].name'],
    ['a malformed hash', `keys:\n  - name: alice\n    sha256: 9f86d0\n`, 'api.keys_file: keys[0].sha256'],
    ['a limit of 0', `keys:\n  - name: alice\n    sha256: ${sha('a')}\n    limits: {rpm: 0}\n`, 'api.keys_file: keys[0].limits.rpm'],
    ['a negative limit', `keys:\n  - name: alice\n    sha256: ${sha('a')}\n    limits: {tokens_per_day: -5}\n`, 'api.keys_file: keys[0].limits.tokens_per_day'],
    ['an unknown role', `keys:\n  - name: alice\n    sha256: ${sha('a')}\n    role: owner\n`, 'api.keys_file: keys[0].role'],
  ];
  for (const [what, yaml, key] of bad) {
    it(`fails on ${what}, naming ${key}`, async () => {
      const r = await check(configWith(yaml));
      assert.equal(r.code, 1);
      const f = r.findings.find((x) => x.level === 'error' && x.key === key);
      assert.ok(f, JSON.stringify(r.findings));
    });
  }
});
