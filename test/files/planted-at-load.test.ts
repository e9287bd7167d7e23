/**
 * Issue 44 item 6: a same-size wrong file put under a fetched copy's name in
 * node.models_dir is never what the engine loads, however late it comes. The
 * window was between the node's check of the copy and the engine opening
 * its `--model` path (a load waits for the node's load lock, then spawns;
 * on a busy machine that is long). Here the window is held open on purpose:
 * pl-b's engine is a wrapper that, once spawned, waits for the test's word
 * before it reads the file it was given; the test puts the impostor under
 * the copy's name (renamed into place, same size, same mtime) meanwhile.
 * The engine must read the verified bytes; the name's impostor is neither
 * published nor loaded by the next load, which fetches the file again.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { FAKE_LLAMA_SERVER } from '../fakes/fake-engine.ts';
import { writeTinyGguf } from '../fakes/tiny-gguf.ts';
import { waitFor } from '../fakes/wait.ts';
import { getJson, startMeshNode, stopAll, waitConverged, type MeshNode } from '../helpers/mesh.ts';
import { tempDir } from '../helpers/node.ts';

const IP = (n: number) => `127.0.175.${n}`;
const sha256 = (file: string) => crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex');

describe('a file put under a fetched copy’s name while the engine starts', () => {
  const dir = tempDir('vw-planted-');
  fs.mkdirSync(path.join(dir, 'a'));
  const file = writeTinyGguf(path.join(dir, 'a', 'tiny.gguf'), { seed: 23 });
  const sha = sha256(file);
  const copy = path.join(dir, 'b', 'models', 'tiny.gguf');
  const gate = path.join(dir, 'gate');
  fs.mkdirSync(gate);
  // The engine: records that it was spawned, waits for the word, hashes the file its --model names, then is the fake llama-server.
  const engine = path.join(dir, 'engine.sh');
  fs.writeFileSync(
    engine,
    [
      '#!/bin/sh',
      `G='${gate}'`,
      'model=""; prev=""',
      'for a in "$@"; do [ "$prev" = "--model" ] && model="$a"; prev="$a"; done',
      'touch "$G/spawned"',
      'while [ ! -e "$G/go" ]; do sleep 0.02; done',
      'sha256sum < "$model" | cut -d" " -f1 > "$G/loaded.tmp" && mv "$G/loaded.tmp" "$G/loaded.sha"',
      `exec '${FAKE_LLAMA_SERVER}' "$@"`,
      '',
    ].join('\n'),
    { mode: 0o755 },
  );
  const entry = { name: 'tiny', engine: 'llamacpp', memory: '64MiB', workloads: ['chat'] };
  const nodes: MeshNode[] = [];
  const tinyOf = async (b: MeshNode) => (await getJson(`${b.url}/v1/capacity`)).models.find((m: any) => m.name === 'tiny');
  const loaded = (b: MeshNode) => waitFor(async () => (await tinyOf(b))?.targets[0]?.state === 'loaded', { timeoutMs: 60_000, intervalMs: 100, what: 'pl-b loaded tiny' });
  const load = async (b: MeshNode) => {
    const r = await request(`${b.url}/v1/models/tiny/load`, { method: 'POST' });
    await r.body.dump();
    assert.ok(r.statusCode < 300, `load asked: ${r.statusCode}`);
  };
  /** The engine's view: the sha256 of what it read, once it read it. */
  const engineRead = () => waitFor(() => fs.existsSync(path.join(gate, 'loaded.sha')) && fs.readFileSync(path.join(gate, 'loaded.sha'), 'utf8').trim(), { timeoutMs: 30_000, what: 'the engine read its model' });
  /** Other bytes of the copy's size and mtime, renamed into place: what `cp -p` then `mv` leaves. */
  const plant = () => {
    const bytes = fs.readFileSync(copy);
    bytes[bytes.length - 1] ^= 0xff;
    const st = fs.statSync(copy);
    const tmp = path.join(dir, 'b', 'hand.tmp');
    fs.writeFileSync(tmp, bytes);
    fs.utimesSync(tmp, st.atime, st.mtime);
    fs.renameSync(tmp, copy);
    assert.notEqual(sha256(copy), sha);
    assert.equal(fs.statSync(copy).size, st.size);
  };

  before(async () => {
    nodes.push(await startMeshNode({ name: 'pl-a', ip: IP(1), models: [{ ...entry, path: file, llamacpp: { binary: FAKE_LLAMA_SERVER } }] }));
    nodes.push(
      await startMeshNode({
        name: 'pl-b',
        ip: IP(2),
        seeds: [nodes[0].gossip],
        models: [{ ...entry, load: 'on_demand', path: path.join(dir, 'b', 'absent', 'tiny.gguf'), llamacpp: { binary: engine } }],
        node: { models_dir: path.join(dir, 'b', 'models'), memory_budget: '1GiB' },
      }),
    );
    await waitConverged(nodes);
    await waitFor(async () => (await getJson(`${nodes[1].url}/v1/models`)).data.some((m: any) => m.id === 'tiny'), { timeoutMs: 30_000, what: 'pl-b lists tiny' });
    await waitFor(async () => (await tinyOf(nodes[0]))?.file?.sha256 === sha, { timeoutMs: 30_000, what: 'pl-a publishes its file' });
  });
  after(async () => {
    fs.writeFileSync(path.join(gate, 'go'), '');
    await stopAll(nodes);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('the engine reads the verified bytes, not the file put under their name after the check', async () => {
    const b = nodes[1];
    await load(b);
    await waitFor(() => fs.existsSync(path.join(gate, 'spawned')), { timeoutMs: 60_000, what: 'pl-b fetched tiny and spawned its engine' });
    assert.equal(sha256(copy), sha, 'pl-b fetched the true file');
    plant();
    fs.writeFileSync(path.join(gate, 'go'), '');
    assert.equal(await engineRead(), sha, 'the engine loaded the impostor put under the copy’s name');
    await loaded(b);
    // Nothing vouches for what the name holds now: not published as the model's file.
    assert.equal((await tinyOf(b))?.file, undefined);
  });

  it('the next load does not take the impostor: it fetches the file again and loads that', async () => {
    const b = nodes[1];
    const r = await request(`${b.url}/v1/models/tiny/unload`, { method: 'POST' });
    await r.body.dump();
    await waitFor(async () => (await tinyOf(b))?.targets[0]?.state === 'unloaded', { timeoutMs: 30_000, what: 'pl-b unloaded tiny' });
    fs.rmSync(path.join(gate, 'loaded.sha'));
    const fetchesBefore = b.logs().match(/fetching tiny: \d+ bytes/g)?.length ?? 0;
    await load(b);
    assert.equal(await engineRead(), sha);
    await loaded(b);
    assert.equal(b.logs().match(/fetching tiny: \d+ bytes/g)?.length ?? 0, fetchesBefore + 1, 'fetched again');
    assert.equal(sha256(copy), sha, 'the impostor was fetched over');
    assert.equal((await tinyOf(b))?.file?.sha256, sha);
  });
});
