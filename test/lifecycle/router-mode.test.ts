/**
 * Issue 41, third target: a node with a router-mode llama-server of two
 * models serves both through the mesh, loads on demand and unloads when
 * idle, on the real engine. The router (`llama-server --models-dir DIR`, no
 * `-m`) runs one child per loaded model on an OS-ephemeral port of
 * 127.0.0.1; the node reaches the children only through the router. Also:
 * a router that holds one model at a time evicts one for another under the
 * node, which counts it unloaded and loads it again when asked.
 *
 * Runs against the engine test/helpers/engine.ts finds (VIIWORK_LLAMA_SERVER,
 * else the build of `npm run engine`; router mode needs today's).
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { writeTinyGguf } from '../fakes/tiny-gguf.ts';
import { waitFor } from '../fakes/wait.ts';
import { getJson, postJson, startSeeded, stopAll, waitModelOn, type MeshNode } from '../helpers/mesh.ts';
import { startNode, tempDir, type TestNode } from '../helpers/node.ts';
import { realLlamaServer } from '../helpers/engine.ts';

const { binary: BINARY, skip } = realLlamaServer();

const ROUTER = 'http://127.0.141.10:18141';

/** The router's own word on each model's state. */
async function routerStates(url = ROUTER): Promise<Record<string, string>> {
  const doc = await getJson<{ data: { id: string; status: { value: string } }[] }>(`${url}/models`);
  return Object.fromEntries(doc.data.map((m) => [m.id, m.status.value]));
}

/** One model's target on a node, from its own /v1/capacity. */
async function targetOn(node: MeshNode, model: string): Promise<{ slots: number; state: string } | undefined> {
  const doc = await getJson<{ models: { name: string; slots: number; targets: { state: string }[] }[] }>(`${node.url}/v1/capacity`);
  const m = doc.models.find((x) => x.name === model);
  return m && { slots: m.slots, state: m.targets[0].state };
}

function chat(node: MeshNode, model: string) {
  return postJson(`${node.url}/v1/chat/completions`, { model, messages: [{ role: 'user', content: 'Say hello.' }], max_tokens: 4, temperature: 0 });
}

/** A router of alpha and beta (tiny GGUFs) at `url`, in its own process group so its children go with it. */
async function startRouter(url: string, modelsMax: number): Promise<{ log(): string; kill(): void }> {
  const dir = tempDir('viiwork-router-');
  const models = path.join(dir, 'models');
  fs.mkdirSync(models);
  writeTinyGguf(path.join(models, 'alpha.gguf'), { contextLength: 1024 });
  writeTinyGguf(path.join(models, 'beta.gguf'), { contextLength: 1024, seed: 7 });
  const cache = path.join(dir, 'llama-cache');
  fs.mkdirSync(cache);
  const { hostname, port } = new URL(url);
  // llama-server binds with SO_REUSEPORT: a router left running by an interrupted run would share the port and
  // answer some of these requests with its own loaded models (seen once: "alpha loaded" before any request).
  const stray = await request(`${url}/health`).then(
    async (r) => (await r.body.text(), true),
    () => false,
  );
  assert.ok(!stray, `something already answers at ${url} (a router left by an interrupted run?): stop it first`);
  const proc: ChildProcess = spawn(BINARY!, ['--models-dir', models, '--models-max', String(modelsMax), '-t', '1', '--host', hostname, '--port', port], {
    env: { ...process.env, LLAMA_CACHE: cache },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let log = '';
  proc.stdout!.on('data', (d) => (log += d));
  proc.stderr!.on('data', (d) => (log += d));
  const kill = () => {
    if (proc.pid && proc.exitCode === null && proc.signalCode === null) {
      try {
        process.kill(-proc.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  };
  await waitFor(
    async () => {
      const r = await request(`${url}/health`);
      await r.body.text();
      return r.statusCode === 200;
    },
    { timeoutMs: 30_000, what: 'the router answering' },
  ).catch((err) => {
    kill();
    throw err;
  });
  return { log: () => log, kill };
}

describe("a router-mode llama-server's models through the mesh", { skip }, () => {
  let router: Awaited<ReturnType<typeof startRouter>> | undefined;
  const nodes: MeshNode[] = [];

  before(async () => {
    router = await startRouter(ROUTER, 2);
    // A runs the router's models; B serves none itself and reaches them through A.
    await startSeeded(nodes, [
      { name: 'a', ip: '127.0.141.11', models: [{ name: 'router', engine: 'openai', url: ROUTER, models: 'auto', idle_unload: '4s' }] },
      { name: 'b', ip: '127.0.141.12' },
    ]);
  });

  after(async () => {
    await stopAll(nodes);
    router?.kill();
  });

  it('lists both models, loads each on its first request through the mesh, and unloads both when idle', async () => {
    const [a, b] = nodes;
    assert.deepEqual(await routerStates(), { alpha: 'unloaded', beta: 'unloaded' });
    for (const n of [a, b]) {
      const ids = (await getJson<{ data: { id: string }[] }>(`${n.url}/v1/models`)).data.map((m) => m.id).sort();
      assert.deepEqual(ids, ['alpha', 'beta'], `${n.name} lists the router's models`);
    }

    const first = await chat(b, 'alpha');
    assert.equal(first.status, 200, `${first.text}\n--- a ---\n${a.logs()}\n--- router ---\n${router!.log().slice(-3000)}`);
    assert.equal(first.headers['x-viiwork-node'], 'a', 'B forwarded it to A, which runs the router');
    assert.equal((await routerStates()).alpha, 'loaded', 'the node asked the router to load alpha');
    assert.equal((await routerStates()).beta, 'unloaded', 'beta stays unloaded until asked for');
    // The router's child runs llama-server's automatic 4 slots: the node reports those, not the entry's default.
    assert.equal((await targetOn(a, 'alpha'))?.slots, 4);
    await waitModelOn(b, 'alpha', ['a']);

    const second = await chat(b, 'beta');
    assert.equal(second.status, 200, `${second.text}\n--- a ---\n${a.logs()}`);
    assert.equal(second.headers['x-viiwork-node'], 'a');
    assert.equal(typeof JSON.parse(second.text).choices[0].message.content, 'string', "beta's child answered");
    assert.deepEqual(await routerStates(), { alpha: 'loaded', beta: 'loaded' });
    assert.match(a.logs(), /loading beta \(request\)/);

    // No request for idle_unload (4 s): the node unloads both through the router.
    await waitFor(async () => JSON.stringify(await routerStates()) === JSON.stringify({ alpha: 'unloaded', beta: 'unloaded' }), {
      timeoutMs: 30_000,
      intervalMs: 200,
      what: 'both models unloaded on the router',
    });
    await waitFor(async () => (await targetOn(a, 'alpha'))?.state === 'unloaded' && (await targetOn(a, 'beta'))?.state === 'unloaded', { what: 'a reports both unloaded' });
    assert.match(a.logs(), /unloading alpha \(idle\)/);
    assert.match(a.logs(), /unloading beta \(idle\)/);

    // Unloaded is still available: the next request loads it again.
    const again = await chat(b, 'alpha');
    assert.equal(again.status, 200, again.text);
    assert.equal((await routerStates()).alpha, 'loaded');
  });
});

describe('a router that holds one model at a time (--models-max 1)', { skip }, () => {
  const url = 'http://127.0.141.14:18142';
  let router: Awaited<ReturnType<typeof startRouter>> | undefined;
  let t: TestNode | undefined;
  before(async () => {
    router = await startRouter(url, 1);
    t = await startNode({ api: { host: '127.0.141.13' }, models: [{ name: 'router', engine: 'openai', url, models: 'auto', idle_unload: '10m' }] });
  });
  after(async () => {
    await t?.stop();
    router?.kill();
  });

  async function ask(model: string): Promise<number> {
    const r = await request(`${t!.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'Say hello.' }], max_tokens: 4 }),
    });
    await r.body.text();
    return r.statusCode;
  }
  async function stateOf(model: string): Promise<string | undefined> {
    const doc = (await (await request(`${t!.url}/v1/capacity`)).body.json()) as { models: { name: string; targets: { state: string }[] }[] };
    return doc.models.find((m) => m.name === model)?.targets[0].state;
  }

  it('counts a model the router evicted for another as unloaded, and loads it again when asked', async () => {
    assert.equal(await ask('alpha'), 200);
    assert.equal(await stateOf('alpha'), 'loaded');
    assert.equal(await ask('beta'), 200);
    // The router evicted alpha to load beta: the node sees it within its one-second watch.
    await waitFor(async () => (await stateOf('alpha')) === 'unloaded', { timeoutMs: 10_000, what: 'alpha counted unloaded' });
    assert.deepEqual(await routerStates(url), { alpha: 'unloaded', beta: 'loaded' });
    assert.match(t!.logs.join(''), /unloading alpha \(endpoint\): the router unloaded alpha by itself/);
    assert.equal(await ask('alpha'), 200, 'alpha loads again on request');
    assert.equal((await routerStates(url)).alpha, 'loaded');
    await waitFor(async () => (await stateOf('beta')) === 'unloaded', { timeoutMs: 10_000, what: 'beta counted unloaded in turn' });
  });
});
