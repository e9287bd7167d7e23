/** SIGHUP: a valid edit applies model changes without touching unchanged backends; a bad edit is refused whole. */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { request } from 'undici';
import { waitFor } from '../fakes/wait.ts';
import { tempDir } from '../helpers/node.ts';

const BIN = path.resolve('bin/viiwork.js');

const HOST = '127.0.219.7';

function configText(dir: string, port: number, models: string): string {
  return `node: {name: hup, state_dir: ${dir}/state}
api: {host: ${HOST}, port: ${port}}
mesh: {open: true, network: lan, mdns: false, advertise: ${HOST}, port: 0}
models:
${models}`;
}

async function modelIds(url: string): Promise<string[]> {
  const r = await request(`${url}/v1/models`);
  const doc = (await r.body.json()) as { data: { id: string }[] };
  return doc.data.map((m) => m.id);
}

describe('SIGHUP', () => {
  it('adds and removes models on a valid edit, and refuses a bad one without changing anything', async () => {
    const dir = tempDir();
    const file = path.join(dir, 'viiwork.yaml');
    // An address of this test's own: a port taken on 127.0.0.1 (an engine's, another test's) cannot stop the node.
    const port = 8086;
    const url = `http://${HOST}:${port}`;
    fs.writeFileSync(file, configText(dir, port, '  - {name: a, engine: sim, parallel: 1}\n'));
    const child = spawn(process.execPath, [BIN, 'serve', '--config', file], { stdio: ['ignore', 'pipe', 'pipe'] });
    let log = '';
    child.stdout.on('data', (d) => (log += d));
    child.stderr.on('data', (d) => (log += d));
    try {
      await waitFor(() => modelIds(url).then((ids) => ids.join() === 'a'), { timeoutMs: 15_000, what: 'node up with model a' });
      fs.writeFileSync(file, configText(dir, port, '  - {name: a, engine: sim, parallel: 1}\n  - {name: b, engine: sim, parallel: 1}\n'));
      child.kill('SIGHUP');
      await waitFor(() => modelIds(url).then((ids) => ids.join() === 'a,b'), { timeoutMs: 10_000, what: 'model b added' });
      fs.writeFileSync(file, configText(dir, port, '  - {name: b, engine: sim, parallel: 0}\n'));
      child.kill('SIGHUP');
      await waitFor(() => /refused, nothing changed/.test(log), { timeoutMs: 10_000, what: 'bad edit refused' });
      assert.match(log, /models\[0\]\.parallel: expected a positive integer/);
      assert.deepEqual(await modelIds(url), ['a', 'b']);
      fs.writeFileSync(file, configText(dir, port, '  - {name: b, engine: sim, parallel: 1}\n'));
      child.kill('SIGHUP');
      await waitFor(() => modelIds(url).then((ids) => ids.join() === 'b'), { timeoutMs: 10_000, what: 'model a removed' });
    } finally {
      // A node that never started (or already exited) has nothing to wait for.
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        await new Promise((r) => child.once('exit', r));
      }
    }
  });
});
