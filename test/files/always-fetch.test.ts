/**
 * SPEC section 11: an `always` entry whose file is not on this machine is
 * fetched from a member at start, then loaded and kept. af-b starts with the
 * entry's path absent; once af-a (which has the file) is in its view, af-b
 * fetches, verifies and loads it, and it stays an always entry (an
 * operator's unload is refused). A node that can find no members refuses
 * such a config at start instead of waiting for ever.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { request } from 'undici';
import { FAKE_LLAMA_SERVER } from '../fakes/fake-engine.ts';
import { writeTinyGguf } from '../fakes/tiny-gguf.ts';
import { waitFor } from '../fakes/wait.ts';
import { getJson, startMeshNode, stopAll, waitConverged, type MeshNode } from '../helpers/mesh.ts';
import { tempDir } from '../helpers/node.ts';

const run = promisify(execFile);

const IP = (n: number) => `127.0.172.${n}`;

describe('an always entry whose file is on another member', () => {
  const secret = crypto.randomBytes(32).toString('base64');
  const dir = tempDir('vw-always-');
  fs.mkdirSync(path.join(dir, 'a'));
  const file = writeTinyGguf(path.join(dir, 'a', 'tiny.gguf'), { seed: 5 });
  const sha = crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex');
  const entry = { name: 'tiny', engine: 'llamacpp', memory: '64MiB', workloads: ['chat'], llamacpp: { binary: FAKE_LLAMA_SERVER } };
  const nodes: MeshNode[] = [];

  before(async () => {
    const env = { VIIWORK_MESH_SECRET: secret };
    nodes.push(await startMeshNode({ name: 'af-a', ip: IP(1), env, models: [{ ...entry, path: file }] }));
    nodes.push(
      await startMeshNode({
        name: 'af-b',
        ip: IP(2),
        env,
        seeds: [nodes[0].gossip],
        models: [{ ...entry, path: path.join(dir, 'b', 'absent', 'tiny.gguf') }],
        node: { models_dir: path.join(dir, 'b', 'models'), memory_budget: '1GiB' },
      }),
    );
    await waitConverged(nodes);
  });
  after(async () => {
    await stopAll(nodes);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('is fetched at start, verified, loaded, and kept as always', async () => {
    const b = nodes[1];
    await waitFor(async () => (await getJson(`${b.url}/v1/capacity`)).models.find((m: any) => m.name === 'tiny')?.targets[0]?.state === 'loaded', { timeoutMs: 60_000, intervalMs: 100, what: 'af-b loaded the fetched file' });
    assert.match(b.logs(), /fetched \S*tiny\.gguf \(\d+ bytes, sha256 verified\) from af-a/);
    const copy = path.join(dir, 'b', 'models', 'tiny.gguf');
    assert.equal(crypto.createHash('sha256').update(fs.readFileSync(copy)).digest('hex'), sha);
    const m = (await getJson(`${b.url}/v1/capacity`)).models.find((x: any) => x.name === 'tiny');
    assert.deepEqual(m.file, { size: fs.statSync(file).size, sha256: sha });
    assert.equal(m.targets[0].load, undefined, 'an always entry, not on_demand');
    const r = await request(`${b.url}/v1/models/tiny/unload`, { method: 'POST' });
    const body = (await r.body.json()) as { error: { code: string } };
    assert.equal(r.statusCode, 409);
    assert.equal(body.error.code, 'model_always');
  });

  it('after a restart the verified copy is used as it is: not fetched, not hashed again', async () => {
    const b = nodes[1];
    await b.stop();
    const again = await startMeshNode({
      name: 'af-b',
      ip: IP(2),
      env: { VIIWORK_MESH_SECRET: secret },
      seeds: [nodes[0].gossip],
      models: [{ ...entry, path: path.join(dir, 'b', 'absent', 'tiny.gguf') }],
      node: { models_dir: path.join(dir, 'b', 'models'), memory_budget: '1GiB' },
      stateDir: b.stateDir,
    });
    nodes[1] = again;
    await waitFor(async () => (await getJson(`${again.url}/v1/capacity`)).models.find((m: any) => m.name === 'tiny')?.targets[0]?.state === 'loaded', { timeoutMs: 60_000, intervalMs: 100, what: 'af-b loaded its copy' });
    assert.doesNotMatch(again.logs(), /fetching tiny|hashed /);
    const m = (await getJson(`${again.url}/v1/capacity`)).models.find((x: any) => x.name === 'tiny');
    assert.equal(m.file?.sha256, sha, 'the copy is published again from its record');
  });

  it('a node that finds no members refuses the config: the file could never come', async () => {
    const cfg = path.join(dir, 'alone.yaml');
    fs.writeFileSync(
      cfg,
      JSON.stringify({
        node: { name: 'alone', state_dir: path.join(dir, 'alone-state') },
        api: { host: IP(9), port: 8086 },
        mesh: { open: true, network: 'lan', mdns: false, advertise: IP(9), seeds: [] },
        models: [{ ...entry, path: path.join(dir, 'nowhere', 'tiny.gguf') }],
      }),
    );
    await assert.rejects(run(process.execPath, [path.resolve('bin/viiwork.js'), 'check', '--config', cfg], { timeout: 30_000 }), (err: { code: number; stdout: string; stderr: string }) => {
      assert.notEqual(err.code, 0);
      assert.match(err.stdout + err.stderr, /models\[0\]\.path.*does not exist, and this node finds no members/s);
      return true;
    });
  });
});
