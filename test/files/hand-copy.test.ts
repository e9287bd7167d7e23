/**
 * docs/configuration.md, node.models_dir: a copy is used across restarts
 * only by the record its verified fetch left; a file put there by hand is
 * fetched again, never trusted. hc-b fetches the tiny GGUF from hc-a at
 * start; while it is stopped, its copy is replaced by hand with other bytes
 * of the same size and the same mtime (to the nanosecond, as `cp -p` or
 * `touch -r` leave it): once as a new file renamed into place, once
 * rewritten in place. Each time, the restarted hc-b fetches the file again
 * instead of loading the impostor, and publishes the true hash.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { FAKE_LLAMA_SERVER } from '../fakes/fake-engine.ts';
import { writeTinyGguf } from '../fakes/tiny-gguf.ts';
import { waitFor } from '../fakes/wait.ts';
import { getJson, startMeshNode, stopAll, waitConverged, type MeshNode, type MeshNodeSpec } from '../helpers/mesh.ts';
import { tempDir } from '../helpers/node.ts';

const IP = (n: number) => `127.0.174.${n}`;
const sha256 = (file: string) => crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex');

describe('a file put by hand where a fetched copy lies', () => {
  const secret = crypto.randomBytes(32).toString('base64');
  const dir = tempDir('vw-hand-');
  fs.mkdirSync(path.join(dir, 'a'));
  const file = writeTinyGguf(path.join(dir, 'a', 'tiny.gguf'), { seed: 11 });
  const sha = sha256(file);
  const copy = path.join(dir, 'b', 'models', 'tiny.gguf');
  const entry = { name: 'tiny', engine: 'llamacpp', memory: '64MiB', workloads: ['chat'], llamacpp: { binary: FAKE_LLAMA_SERVER } };
  const nodes: MeshNode[] = [];
  const specB = (stateDir?: string): MeshNodeSpec => ({
    name: 'hc-b',
    ip: IP(2),
    env: { VIIWORK_MESH_SECRET: secret },
    seeds: [nodes[0].gossip],
    models: [{ ...entry, path: path.join(dir, 'b', 'absent', 'tiny.gguf') }],
    node: { models_dir: path.join(dir, 'b', 'models'), memory_budget: '1GiB' },
    ...(stateDir ? { stateDir } : {}),
  });
  const loaded = (b: MeshNode) =>
    waitFor(async () => (await getJson(`${b.url}/v1/capacity`)).models.find((m: any) => m.name === 'tiny')?.targets[0]?.state === 'loaded', { timeoutMs: 60_000, intervalMs: 100, what: 'hc-b loaded tiny' });
  /** Other bytes of the same size: the GGUF with its last byte changed, so it still reads as one. */
  const impostor = () => {
    const bytes = fs.readFileSync(file);
    bytes[bytes.length - 1] ^= 0xff;
    return bytes;
  };

  before(async () => {
    const env = { VIIWORK_MESH_SECRET: secret };
    nodes.push(await startMeshNode({ name: 'hc-a', ip: IP(1), env, models: [{ ...entry, path: file }] }));
    nodes.push(await startMeshNode(specB()));
    await waitConverged(nodes);
    await loaded(nodes[1]);
    assert.equal(sha256(copy), sha, 'hc-b fetched the true file first');
  });
  after(async () => {
    await stopAll(nodes);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  async function restartWith(replace: () => void): Promise<MeshNode> {
    const b = nodes[1];
    await b.stop();
    replace();
    assert.notEqual(sha256(copy), sha);
    const again = await startMeshNode(specB(b.stateDir));
    nodes[1] = again;
    await loaded(again);
    return again;
  }

  it('a new file renamed into place with the copy’s size and mtime is fetched over, not loaded', async () => {
    const b = await restartWith(() => {
      const tmp = path.join(dir, 'b', 'hand.tmp');
      fs.writeFileSync(tmp, impostor());
      execFileSync('touch', ['-r', copy, tmp]);
      fs.renameSync(tmp, copy);
    });
    assert.match(b.logs(), /fetching tiny/);
    assert.equal(sha256(copy), sha, 'the impostor was replaced by the verified file');
    const m = (await getJson(`${b.url}/v1/capacity`)).models.find((x: any) => x.name === 'tiny');
    assert.equal(m.file?.sha256, sha);
  });

  it('the copy rewritten in place, its mtime put back, is fetched over, not loaded', async () => {
    const b = await restartWith(() => {
      const ref = path.join(dir, 'b', 'times.ref');
      fs.writeFileSync(ref, '');
      execFileSync('touch', ['-r', copy, ref]);
      fs.writeFileSync(copy, impostor());
      execFileSync('touch', ['-r', ref, copy]);
    });
    assert.match(b.logs(), /fetching tiny/);
    assert.equal(sha256(copy), sha, 'the impostor was replaced by the verified file');
    const m = (await getJson(`${b.url}/v1/capacity`)).models.find((x: any) => x.name === 'tiny');
    assert.equal(m.file?.sha256, sha);
  });
});
