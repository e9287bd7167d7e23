/**
 * Acceptance (SPEC section 11) at a model's real size: three nodes in a
 * secured mesh, a 4.5 GiB sparse GGUF (past 2^32 bytes, so no offset or
 * length may be 32-bit anywhere) on sp-a only, whose budget cannot load it.
 * A request entering sp-c is placed on sp-b or sp-c; that host fetches the
 * file, verifies it and starts its engine (the fake llama-server, which
 * never reads the file), and answers. The copy keeps the source's holes:
 * the receiver does not write runs of zeros, so it costs no more disk than
 * the original.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { FAKE_LLAMA_SERVER } from '../fakes/fake-engine.ts';
import { waitFor } from '../fakes/wait.ts';
import { getJson, startSeeded, stopAll, waitSeesFile, type MeshNode } from '../helpers/mesh.ts';
import { tempDir } from '../helpers/node.ts';

const IP = (n: number) => `127.0.170.${n}`;
const SIZE = 4.5 * 1024 ** 3;

/** A sparse file of `size` bytes: a few MiB of data at the start, one in the middle and at the end, holes between. */
function writeSparse(file: string, size: number): string {
  const head = crypto.randomBytes(2 * 1024 * 1024);
  head.write('GGUF', 0);
  const mid = crypto.randomBytes(1024 * 1024);
  const tail = crypto.randomBytes(64 * 1024);
  const fd = fs.openSync(file, 'w');
  fs.writeSync(fd, head, 0, head.length, 0);
  fs.writeSync(fd, mid, 0, mid.length, Math.floor(size / 2));
  fs.writeSync(fd, tail, 0, tail.length, size - tail.length);
  fs.closeSync(fd);
  // Its SHA-256, computed as the holes read: zeros.
  const h = crypto.createHash('sha256');
  const zeros = Buffer.alloc(16 * 1024 * 1024);
  const pieces: [number, Buffer][] = [
    [0, head],
    [Math.floor(size / 2), mid],
    [size - tail.length, tail],
  ];
  let at = 0;
  for (const [off, data] of pieces) {
    for (; at < off; ) {
      const n = Math.min(zeros.length, off - at);
      h.update(zeros.subarray(0, n));
      at += n;
    }
    h.update(data);
    at += data.length;
  }
  return h.digest('hex');
}

describe('a large sparse model file fetched across the mesh', () => {
  const secret = crypto.randomBytes(32).toString('base64');
  const dir = tempDir('vw-sparse-');
  fs.mkdirSync(path.join(dir, 'a'));
  const file = path.join(dir, 'a', 'big.gguf');
  const sha = writeSparse(file, SIZE);
  const entry = {
    name: 'big',
    engine: 'llamacpp',
    load: 'on_demand',
    memory: '64MiB',
    idle_unload: '0',
    workloads: ['chat'],
    llamacpp: { binary: FAKE_LLAMA_SERVER },
  };
  const nodes: MeshNode[] = [];
  const modelsDir = (n: string) => path.join(dir, n, 'models');

  before(async () => {
    await startSeeded(
      nodes,
      ['sp-a', 'sp-b', 'sp-c'].map((n, i) => ({
        name: n,
        ip: IP(i + 1),
        env: { VIIWORK_MESH_SECRET: secret },
        models: [{ ...entry, path: i === 0 ? file : path.join(dir, n, 'absent', 'big.gguf') }],
        routing: { load_wait: '240s', queue_timeout: '240s' },
        node: { models_dir: modelsDir(n), memory_budget: i === 0 ? '1MiB' : '1GiB' },
      })),
    );
    await waitFor(async () => (await getJson(`${nodes[0].url}/v1/capacity`)).models[0]?.file?.sha256 === sha, { timeoutMs: 120_000, intervalMs: 250, what: 'sp-a hashed its 4.5 GiB file' });
    for (const n of nodes.slice(1)) await waitSeesFile(n, 'big', 'sp-a');
  });
  after(async () => {
    await stopAll(nodes);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('is fetched, verified, loaded and answers, and the copy keeps the holes', async () => {
    const r = await request(`${nodes[2].url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'big', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
      headersTimeout: 300_000,
      bodyTimeout: 300_000,
    });
    const text = await r.body.text();
    assert.equal(r.statusCode, 200, text);
    const host = String(r.headers['x-viiwork-node']);
    assert.ok(host === 'sp-b' || host === 'sp-c', `answered by ${host}, not a host that had to fetch the file`);
    const h = nodes.find((n) => n.name === host)!;
    assert.match(h.logs(), /fetched \S*big\.gguf \(4831838208 bytes, sha256 verified\) from sp-a/);
    const copy = path.join(modelsDir(host), 'big.gguf');
    const st = fs.statSync(copy);
    assert.equal(st.size, SIZE);
    const src = fs.statSync(file);
    // Holes kept: the copy takes about what the source takes on disk (a few MiB), not 4.5 GiB.
    assert.ok(st.blocks * 512 <= src.blocks * 512 + 64 * 1024 ** 2, `the copy takes ${st.blocks * 512} bytes on disk, the source ${src.blocks * 512}`);
    const m = (await getJson(`${h.url}/v1/capacity`)).models.find((x: any) => x.name === 'big');
    assert.deepEqual(m.file, { size: SIZE, sha256: sha });
    assert.equal(m.targets[0].state, 'loaded');
    const metrics = await (await request(`${h.url}/metrics`)).body.text();
    assert.equal(Number(/viiwork_file_transfer_bytes_total\{direction="received"\} (\d+)/.exec(metrics)?.[1]), SIZE);
  });
});
