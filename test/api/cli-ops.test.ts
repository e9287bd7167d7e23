/** The operator commands against a real node: models, status, secret, init. */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { parseConfigText } from '../../src/config/load.ts';
import { waitFor } from '../fakes/wait.ts';
import { startNode, tempDir, type TestNode } from '../helpers/node.ts';

const run = promisify(execFile);
const BIN = path.resolve('bin/viiwork.js');
/** This file's own loopback block, so the two nodes can gossip on the standard port. */
const IP = (n: number) => `127.0.31.${n}`;

/** Parse a command's stdout the way a script would: through jq when the machine has it, else JSON.parse. */
async function viaJq(stdout: string): Promise<any> {
  const parsed = JSON.parse(stdout);
  try {
    const jq = execFile('jq', ['-c', '.']);
    const done = new Promise<string>((resolve, reject) => {
      let out = '';
      jq.stdout!.on('data', (d) => (out += d));
      jq.once('error', reject);
      jq.once('close', (code) => (code === 0 ? resolve(out) : reject(new Error(`jq exited ${code}`))));
    });
    jq.stdin!.end(stdout);
    assert.deepEqual(JSON.parse(await done), parsed);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  return parsed;
}

describe('operator commands', () => {
  let t: TestNode;
  let peer: TestNode;
  before(async () => {
    // Every member polled every 250 ms (not only those this node routes to), so each report the status shows is fresh.
    const mesh = (n: number) => ({ advertise: IP(n), port: 7946, capacity_poll: '250ms', capacity_background: '250ms', seeds: n === 1 ? [] : [`${IP(1)}:7946`] });
    t = await startNode({ node: { name: 'opsnode' }, api: { host: IP(1) }, mesh: mesh(1), models: [{ name: 'm1', engine: 'sim', parallel: 3, workloads: ['chat'] }] });
    peer = await startNode({ node: { name: 'opspeer' }, api: { host: IP(2) }, mesh: mesh(2), models: [{ name: 'm2', engine: 'sim', parallel: 2, workloads: ['chat', 'completion'] }] });
    await waitFor(
      async () => {
        const { stdout } = await run(process.execPath, [BIN, 'models', '--json', '--url', t.url]);
        return JSON.parse(stdout).data.some((m: { id: string }) => m.id === 'm2');
      },
      { timeoutMs: 15_000, intervalMs: 200, what: 'opsnode sees the model of opspeer' },
    );
  });
  after(async () => {
    await peer?.stop();
    await t?.stop();
  });

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

  it('viiwork models --json prints the /v1/models document: every model, its workloads and hosts', async () => {
    const { stdout } = await run(process.execPath, [BIN, 'models', '--json', '--url', t.url]);
    const doc = await viaJq(stdout);
    assert.equal(doc.object, 'list');
    assert.deepEqual(
      doc.data.map((m: any) => [m.id, m.owned_by, m.workloads, m.hosts]),
      [
        ['m1', 'viiwork', ['chat'], ['opsnode']],
        ['m2', 'viiwork', ['chat', 'completion'], ['opspeer']],
      ],
    );
    assert.equal(doc.data[0].context_length, 8192);
  });

  it('viiwork status --json lists every member and every model × host with its slots', async () => {
    const { stdout } = await run(process.execPath, [BIN, 'status', '--json', '--url', t.url]);
    const doc = await viaJq(stdout);
    assert.equal(doc.node, 'opsnode');
    assert.equal(doc.mode, 'open');
    assert.equal(typeof doc.at, 'number');
    assert.deepEqual(doc.members.map((m: any) => [m.name, m.state, m.self]).sort(), [
      ['opsnode', 'alive', true],
      ['opspeer', 'alive', false],
    ]);
    for (const m of doc.members) for (const k of ['role', 'gossip', 'api', 'version', 'since']) assert.ok(k in m, `member field ${k}`);
    const hosts = doc.models.flatMap((m: any) => m.hosts.map((h: any) => [m.name, h.node, h.slots, h.busy, h.free, h.fresh]));
    assert.deepEqual(hosts, [
      ['m1', 'opsnode', 3, 0, 3, true],
      ['m2', 'opspeer', 2, 0, 2, true],
    ]);
  });

  it('viiwork status --json writes nothing to stdout when the node is unreachable', async () => {
    await assert.rejects(run(process.execPath, [BIN, 'status', '--json', '--url', 'http://127.0.0.1:9']), (e: { stdout: string; stderr: string; code: number }) => {
      assert.equal(e.code, 1);
      assert.equal(e.stdout, '');
      assert.match(e.stderr, /cannot reach the node/);
      return true;
    });
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
