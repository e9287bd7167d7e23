/** The operator commands against a real node: models, status, secret, init. */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { parseConfigText } from '../../src/config/load.ts';
import { startNode, tempDir, type TestNode } from '../helpers/node.ts';

const run = promisify(execFile);
const BIN = path.resolve('bin/viiwork.js');

describe('operator commands', () => {
  let t: TestNode;
  before(async () => {
    t = await startNode({ node: { name: 'opsnode' }, models: [{ name: 'm1', engine: 'sim', parallel: 3, workloads: ['chat'] }] });
  });
  after(() => t.stop());

  it('viiwork models prints every model with its workloads and hosts', async () => {
    const { stdout } = await run(process.execPath, [BIN, 'models', '--url', t.url]);
    assert.match(stdout, /^MODEL\s+KIND\s+CONTEXT\s+WORKLOADS\s+HOSTS/m);
    assert.match(stdout, /^m1\s+model\s+8192\s+chat\s+opsnode$/m);
  });

  it('viiwork status prints each model × host with busy and free slots', async () => {
    const { stdout } = await run(process.execPath, [BIN, 'status', '--url', t.url]);
    assert.match(stdout, /mesh seen from opsnode/);
    assert.match(stdout, /^m1\s+opsnode\s+0\/3\s+3\s+fresh/m);
  });

  it('viiwork status names the node it could not reach', async () => {
    await assert.rejects(run(process.execPath, [BIN, 'status', '--url', 'http://127.0.0.1:9']), (e: { stderr: string; code: number }) => {
      assert.equal(e.code, 1);
      assert.match(e.stderr, /cannot reach the node at http:\/\/127\.0\.0\.1:9/);
      return true;
    });
  });

  it('viiwork secret prints base64 of 32 random bytes, different each time', async () => {
    const a = (await run(process.execPath, [BIN, 'secret'])).stdout.trim();
    const b = (await run(process.execPath, [BIN, 'secret'])).stdout.trim();
    assert.equal(Buffer.from(a, 'base64').length, 32);
    assert.notEqual(a, b);
  });

  it('viiwork init writes a config that validates, and never overwrites without --force', async () => {
    const file = path.join(tempDir(), 'viiwork.yaml');
    await run(process.execPath, [BIN, 'init', '-o', file, '--name', 'box1', '--open', '--sim']);
    const c = parseConfigText(fs.readFileSync(file, 'utf8'));
    assert.equal(c.node.name, 'box1');
    assert.equal(c.mesh.open, true);
    assert.equal(c.models[0].engine, 'sim');
    await assert.rejects(run(process.execPath, [BIN, 'init', '-o', file]), /exists; pass --force/);
  });
});
