/**
 * SPEC section 11: fetching a model file from members. A transfer cut in
 * the middle (the sender killed) resumes from another member and completes
 * with the right hash; a sender serving corrupted bytes is detected and
 * nothing is kept from it; a truncated transfer resumes later from the
 * partial file; disk space and cancellation. The senders are real nodes in a
 * secured mesh (this test signs as member ff-c, holding the mesh secret as
 * ff-c does); the broken senders are small HTTP servers that misbehave.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fetchFile, FetchError, type FetchSource } from '../../src/files/fetch.ts';
import { partialPath } from '../../src/files/paths.ts';
import { EMPTY_BODY_SHA256, RequestSigner } from '../../src/security/signing.ts';
import { FAKE_LLAMA_SERVER } from '../fakes/fake-engine.ts';
import { tinyGguf } from '../fakes/tiny-gguf.ts';
import { waitFor } from '../fakes/wait.ts';
import { getJson, startMeshNode, stopAll, waitConverged, type MeshNode } from '../helpers/mesh.ts';
import { tempDir } from '../helpers/node.ts';

const IP = (n: number) => `127.0.141.${n}`;
const MIB = 1024 * 1024;
const body = Buffer.concat([tinyGguf(), crypto.randomBytes(8 * MIB)]);
const sha = crypto.createHash('sha256').update(body).digest('hex');

/** A sender we do not trust: serves `bytes` (with Range), after `cutAt` bytes it drops the connection. */
function brokenSender(bytes: Buffer, opts: { cutAt?: number } = {}): Promise<{ url: string; close(): Promise<void>; hits: number }> {
  const state = { hits: 0 };
  const server = http.createServer((req, res) => {
    state.hits++;
    const m = /^bytes=(\d+)-$/.exec(String(req.headers.range ?? ''));
    const start = m ? Number(m[1]) : 0;
    const part = bytes.subarray(start);
    res.writeHead(m ? 206 : 200, { 'content-length': part.length, ...(m ? { 'content-range': `bytes ${start}-${bytes.length - 1}/${bytes.length}` } : {}) });
    if (opts.cutAt !== undefined) {
      res.write(part.subarray(0, Math.max(0, opts.cutAt - start)), () => setTimeout(() => res.destroy(), 20));
    } else res.end(part);
  });
  return new Promise((resolve) =>
    server.listen(0, IP(20), () =>
      resolve({
        url: `http://${IP(20)}:${(server.address() as AddressInfo).port}`,
        close: () => new Promise<void>((r) => server.close(() => r())),
        get hits() {
          return state.hits;
        },
      }),
    ),
  );
}

describe('fetching a model file from members', () => {
  const secret = crypto.randomBytes(32);
  const signer = new RequestSigner(secret);
  const dirs = { a: tempDir('vw-ff-a-'), b: tempDir('vw-ff-b-'), c: tempDir('vw-ff-c-') };
  let nodes: MeshNode[] = [];
  let a: MeshNode;
  let b: MeshNode;
  const headers = (s: FetchSource, p: string) => ({ ...signer.sign({ method: 'GET', pathWithQuery: p, node: 'ff-c', to: s.name, bodySha256: EMPTY_BODY_SHA256 }) });
  const src = (n: MeshNode): FetchSource => ({ name: n.name, api: n.url });

  before(async () => {
    const env = { VIIWORK_MESH_SECRET: secret.toString('base64') };
    for (const d of [dirs.a, dirs.b]) fs.writeFileSync(path.join(d, 'model.gguf'), body);
    const entry = (d: string) => [{ name: 'mf', engine: 'llamacpp', path: path.join(d, 'model.gguf'), load: 'on_demand', memory: '1GiB', llamacpp: { binary: FAKE_LLAMA_SERVER } }];
    // ff-a sends slowly (2 MiB/s), so it can be killed in the middle of a transfer.
    a = await startMeshNode({ name: 'ff-a', ip: IP(1), env, models: entry(dirs.a), node: { transfer_rate: '2MiB' } });
    b = await startMeshNode({ name: 'ff-b', ip: IP(2), env, models: entry(dirs.b), seeds: [a.gossip] });
    const c = await startMeshNode({ name: 'ff-c', ip: IP(3), env, seeds: [a.gossip] });
    nodes = [a, b, c];
    await waitConverged(nodes);
    for (const n of [a, b]) await waitFor(async () => (await getJson(`${n.url}/v1/capacity`)).models[0]?.file?.sha256 === sha, { timeoutMs: 20_000, what: `${n.name} hashed` });
  });
  after(async () => {
    await stopAll(nodes);
    for (const d of Object.values(dirs)) fs.rmSync(d, { recursive: true, force: true });
  });

  it('a corrupting sender is detected: nothing is kept from it, and the file comes whole from a good member', async () => {
    const bad = Buffer.from(body);
    bad[bad.length >> 1] ^= 0xff;
    const liar = await brokenSender(bad);
    const dir = path.join(dirs.c, 'corrupt');
    const logs: string[] = [];
    try {
      // Only the liar: refused, and neither the file nor a partial remains.
      await assert.rejects(
        fetchFile({ sha256: sha, size: body.length, dest: path.join(dir, 'model.gguf'), modelsDir: dir, sources: [{ name: 'liar', api: liar.url }], headers, reserve: 0, log: (m) => logs.push(m) }),
        (err: FetchError) => err.code === 'corrupt',
      );
      assert.ok(!fs.existsSync(path.join(dir, 'model.gguf')), 'a corrupt file is never renamed into place');
      assert.ok(!fs.existsSync(partialPath(dir, sha)), 'a corrupt partial file is discarded');
      assert.ok(logs.some((l) => l.includes('discarded') && l.includes('liar')), logs.join('\n'));
      // The liar first, then a good member: the good one's bytes alone make the file.
      const r = await fetchFile({ sha256: sha, size: body.length, dest: path.join(dir, 'model.gguf'), modelsDir: dir, sources: [{ name: 'liar', api: liar.url }, src(b)], headers, reserve: 0, log: (m) => logs.push(m) });
      assert.deepEqual(r.from, ['ff-b']);
      assert.ok(fs.readFileSync(r.path).equals(body));
    } finally {
      await liar.close();
    }
  });

  it('a truncated transfer keeps its partial file, and a later fetch resumes it with Range', async () => {
    const cutter = await brokenSender(body, { cutAt: 3 * MIB });
    const dir = path.join(dirs.c, 'truncated');
    try {
      await assert.rejects(
        fetchFile({ sha256: sha, size: body.length, dest: path.join(dir, 'model.gguf'), modelsDir: dir, sources: [{ name: 'cutter', api: cutter.url }], headers, reserve: 0 }),
        (err: FetchError) => err.code === 'no_source',
      );
      assert.ok(!fs.existsSync(path.join(dir, 'model.gguf')), 'a truncated file is never renamed into place');
      const kept = fs.statSync(partialPath(dir, sha)).size;
      assert.ok(kept >= 1 && kept <= 3 * MIB, `kept ${kept}`);
      const r = await fetchFile({ sha256: sha, size: body.length, dest: path.join(dir, 'model.gguf'), modelsDir: dir, sources: [src(b)], headers, reserve: 0 });
      assert.equal(r.resumed, kept);
      assert.ok(fs.readFileSync(r.path).equals(body));
      assert.ok(!fs.existsSync(partialPath(dir, sha)));
    } finally {
      await cutter.close();
    }
  });

  it('two fetches of one file into one directory at once (a hand-off and a move) each end with the whole file', async () => {
    // Both would write the one partial file `.<sha>.part`: interleaved, the second failed its hash (issue 43's bench).
    const dir = path.join(dirs.c, 'twice');
    const one = (name: string) => fetchFile({ sha256: sha, size: body.length, dest: path.join(dir, name), modelsDir: dir, sources: [src(b)], headers, reserve: 0 });
    const [x, y] = await Promise.all([one('first.bin'), one('second.bin')]);
    for (const r of [x, y]) {
      assert.ok(fs.readFileSync(r.path).equals(body), `${r.path} is whole`);
      fs.closeSync(r.fd);
    }
    assert.ok(!fs.existsSync(partialPath(dir, sha)));
  });

  it('refuses before transferring when the disk would fall below the reserve', async () => {
    const dir = path.join(dirs.c, 'full');
    await assert.rejects(
      fetchFile({ sha256: sha, size: body.length, dest: path.join(dir, 'model.gguf'), modelsDir: dir, sources: [src(b)], headers, freeBytes: async () => body.length + 10, reserve: 1024 }),
      (err: FetchError) => err.code === 'no_space' && /node\.models_dir/.test(err.message),
    );
    assert.ok(!fs.existsSync(partialPath(dir, sha)));
  });

  it("refuses a file whose hash is not the entry's sha256", async () => {
    const dir = path.join(dirs.c, 'pinned');
    await assert.rejects(
      fetchFile({ sha256: sha, size: body.length, dest: path.join(dir, 'model.gguf'), modelsDir: dir, sources: [src(b)], headers, expect: 'f'.repeat(64), reserve: 0 }),
      (err: FetchError) => err.code === 'mismatch',
    );
    assert.ok(!fs.existsSync(path.join(dir, 'model.gguf')));
  });

  it('cancelled (the node stops): no file in place, the partial kept for a resume', async () => {
    const dir = path.join(dirs.c, 'cancel');
    const ac = new AbortController();
    await assert.rejects(
      fetchFile({
        sha256: sha,
        size: body.length,
        dest: path.join(dir, 'model.gguf'),
        modelsDir: dir,
        sources: [src(a)],
        headers,
        reserve: 0,
        signal: ac.signal,
        onProgress: (p) => p.bytes >= MIB && ac.abort(),
      }),
      (err: FetchError) => err.code === 'cancelled',
    );
    assert.ok(!fs.existsSync(path.join(dir, 'model.gguf')));
    assert.ok(fs.statSync(partialPath(dir, sha)).size >= MIB);
  });

  it('a transfer cut in the middle (the sender killed) resumes from another member and completes with the right hash', async () => {
    const dir = path.join(dirs.c, 'killed');
    const logs: string[] = [];
    let killedAt = 0;
    const r = await fetchFile({
      sha256: sha,
      size: body.length,
      dest: path.join(dir, 'model.gguf'),
      modelsDir: dir,
      sources: [src(a), src(b)],
      headers,
      reserve: 0,
      log: (m) => logs.push(m),
      onProgress: (p) => {
        if (!killedAt && p.from === 'ff-a' && p.bytes >= 2 * MIB) {
          killedAt = p.bytes;
          a.proc.kill('SIGKILL');
        }
      },
    });
    assert.ok(killedAt > 0, 'ff-a was killed mid-transfer');
    assert.deepEqual(r.from, ['ff-a', 'ff-b']);
    assert.equal(r.sha256, sha);
    assert.ok(fs.readFileSync(r.path).equals(body));
    assert.ok(logs.some((l) => l.includes('from ff-a stopped at')), logs.join('\n'));
  });
});
