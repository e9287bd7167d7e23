/**
 * Issue 12, acceptance 4: gossip runs on a thread of its own
 * (src/mesh/thread/), so a 10 s stall of the thread that serves the API — a
 * busy loop in a request handler, preloaded by test/mesh/stall-hook.mjs —
 * makes no peer suspect the node, and the node is fine afterwards. The
 * control runs the very same engine inline (VIIWORK_GOSSIP_INLINE=1): the
 * same stall is then seen as a failure, so the first test proves something.
 *
 * Real `viiwork serve` processes on 127.0.42.x.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { parse, stringify } from 'yaml';
import { waitFor } from '../fakes/wait.ts';
import { getJson, postJson, startMeshNode, stopAll, waitConverged, waitModelOn, type MeshNode, type MeshNodeSpec } from '../helpers/mesh.ts';

const STALL_MS = 10_000;
const HOOK = pathToFileURL(path.resolve('test/mesh/stall-hook.mjs')).href;
const sim = { ttft_ms: 1, prefill_ms_per_1k: 1, tokens_per_s: 2000, output_tokens: 1 };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The environment of a node that has the stall route (and debug lines, which show memberlist's suspicions and refutations). */
function env(extra: Record<string, string> = {}): Record<string, string> {
  return { VIIWORK_DEBUG: '1', NODE_OPTIONS: [process.env.NODE_OPTIONS, `--import=${HOOK}`].filter(Boolean).join(' '), ...extra };
}

interface MeshEntry {
  name: string;
  state: string;
  since: string;
}

async function entryOf(viewer: MeshNode, name: string): Promise<MeshEntry | undefined> {
  const mesh = await getJson<{ members: MeshEntry[] }>(`${viewer.url}/v1/mesh`);
  return mesh.members.find((m) => m.name === name);
}

/**
 * Polls every viewer's /v1/mesh for `name` until stopped; every answer in
 * which it is not alive is recorded. (A viewer that does not answer is
 * recorded too: the viewers are not the ones stalled.)
 */
function watch(viewers: MeshNode[], name: string) {
  const notAlive: string[] = [];
  const t0 = Date.now();
  let polls = 0;
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      for (const v of viewers) {
        try {
          const e = await entryOf(v, name);
          polls++;
          if (e?.state !== 'alive') notAlive.push(`${v.name} saw ${name} ${e?.state ?? 'missing'} at +${Date.now() - t0} ms`);
        } catch (err) {
          notAlive.push(`${v.name} did not answer at +${Date.now() - t0} ms: ${(err as Error).message}`);
        }
      }
      await sleep(200);
    }
  })();
  return {
    notAlive,
    async stop(): Promise<number> {
      stopped = true;
      await loop;
      return polls;
    },
  };
}

/** The node to stall, then two peers on the next addresses that join it, pushed to `nodes` as they start; resolves once all three see each other. */
async function startTrio(nodes: MeshNode[], first: MeshNodeSpec, peers: [string, string]): Promise<void> {
  nodes.push(await startMeshNode(first));
  const base = first.ip.replace(/\d+$/, '');
  const last = Number(first.ip.split('.')[3]);
  for (const [i, name] of peers.entries()) nodes.push(await startMeshNode({ name, ip: `${base}${last + 1 + i}`, env: env(), seeds: [`${first.ip}:7946`] }));
  await waitConverged(nodes, 20_000);
}

/** Busy-loops `node`'s API thread for `ms` in a request handler; resolves when the handler returns, with how long it spun. */
async function stall(node: MeshNode, ms: number): Promise<number> {
  const r = await request(`${node.url}/__test/stall?ms=${ms}`, { headersTimeout: ms + 60_000 });
  assert.equal(r.statusCode, 200, 'the stall route answers (is test/mesh/stall-hook.mjs preloaded?)');
  const body = (await r.body.json()) as { stalledMs: number; spins: number };
  assert.ok(body.spins > 0);
  return body.stalledMs;
}

describe('a 10 s stall of the API thread, gossip on its own thread', () => {
  const nodes: MeshNode[] = [];
  before(() => startTrio(nodes, { name: 'stalled', ip: '127.0.42.1', env: env(), models: [{ name: 'only-on-stalled', engine: 'sim', parallel: 1, sim }] }, ['peer1', 'peer2']));
  after(() => stopAll(nodes));

  it('no peer marks the node suspect or dead, during the stall or after it, and the node serves afterwards', async () => {
    const [s, p1, p2] = nodes;
    const before = await Promise.all([p1, p2].map((p) => entryOf(p, 'stalled')));
    const w = watch([p1, p2], 'stalled');
    const stalledMs = await stall(s, STALL_MS);
    assert.ok(stalledMs >= STALL_MS, `the API thread spun ${stalledMs} ms`);
    // Suspicion of a node that stopped acking shows within ~2 s; a dead verdict within the suspicion timeout (4–24 s here): watch on for 5 s more.
    await sleep(5000);
    const polls = await w.stop();
    assert.deepEqual(w.notAlive, [], `peers lost sight of the stalled node:\n${w.notAlive.join('\n')}`);
    assert.ok(polls >= 2 * ((STALL_MS + 5000) / 1000), `the peers answered ${polls} polls`);
    // Between two polls nothing flipped either: a member's `since` moves with every state change.
    const afterwards = await Promise.all([p1, p2].map((p) => entryOf(p, 'stalled')));
    assert.deepEqual(
      afterwards.map((e) => [e?.state, e?.since]),
      before.map((e) => ['alive', e?.since]),
    );
    for (const p of [p1, p2]) assert.doesNotMatch(p.logs(), /suspect stalled has failed|marking stalled as failed/);
    assert.doesNotMatch(s.logs(), /refuting a (suspect|dead) message/, 'the stalled node never had to refute a suspicion');

    // Fine afterwards: healthy, sees its peers alive, and runs a request forwarded to it.
    const health = await request(`${s.url}/health`, { headersTimeout: 2000 });
    assert.equal(health.statusCode, 200);
    await health.body.text();
    for (const peer of ['peer1', 'peer2']) assert.equal((await entryOf(s, peer))?.state, 'alive');
    await waitModelOn(p1, 'only-on-stalled', ['stalled']);
    const r = await postJson(`${p1.url}/v1/chat/completions`, { model: 'only-on-stalled', messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers['x-viiwork-node'], 'stalled');
  });
});

describe('control: the same stall with the gossip engine inline (VIIWORK_GOSSIP_INLINE=1)', () => {
  const nodes: MeshNode[] = [];
  before(() => startTrio(nodes, { name: 'inline', ip: '127.0.42.11', env: env({ VIIWORK_GOSSIP_INLINE: '1' }) }, ['watcher1', 'watcher2']));
  after(() => stopAll(nodes));

  it('peers suspect the stalled node, which is alive again once the stall ends', async () => {
    const [s, w1, w2] = nodes;
    const w = watch([w1, w2], 'inline');
    const stalledMs = await stall(s, STALL_MS);
    await w.stop();
    assert.ok(stalledMs >= STALL_MS);
    assert.ok(
      w.notAlive.some((l) => / saw inline (suspect|dead) /.test(l)),
      `with gossip on the API thread a 10 s stall should look like a failure; the peers saw:\n${w.notAlive.join('\n') || 'nothing but alive'}`,
    );
    // The node refutes the suspicion (or rejoins) once its thread runs again.
    await waitFor(async () => (await entryOf(w1, 'inline'))?.state === 'alive' && (await entryOf(w2, 'inline'))?.state === 'alive', {
      timeoutMs: 30_000,
      intervalMs: 200,
      what: 'the inline node alive again in both peers',
    });
    // The log lines the first test looks for, so their absence there means something.
    await waitFor(() => /suspect inline has failed|marking inline as failed/.test(w1.logs() + w2.logs()), { what: 'a peer logs the suspicion' });
    await waitFor(() => /refuting a (suspect|dead) message/.test(s.logs()), { what: 'the inline node logs its refutation' });
  });
});

describe('a gossip thread that dies', () => {
  let node: MeshNode | undefined;
  after(() => stopAll([node]));

  it('takes the node down with a message and a non-zero exit, never leaving it silently out of the mesh', async () => {
    node = await startMeshNode({ name: 'loses-gossip', ip: '127.0.42.21', env: env() });
    const r = await request(`${node.url}/__test/end-workers`);
    assert.deepEqual(await r.body.json(), { terminated: 1 }, 'the node runs exactly one worker thread: gossip');
    const code = await Promise.race([node.exited, sleep(15_000).then(() => 'still running')]);
    assert.equal(code, 1, node.logs());
    assert.match(node.logs(), /ERROR \[loses-gossip\] gossip stopped: the gossip worker thread exited \(code 1\); this node is out of the mesh until it restarts; exiting/);
  });
});

describe('metadata computed on the node, gossiped by the thread', () => {
  const nodes: MeshNode[] = [];
  after(() => stopAll(nodes));

  it('a gateway given a model on SIGHUP is a node in its peer\'s view', async () => {
    const gw = await startMeshNode({ name: 'becomes-node', ip: '127.0.42.31' });
    nodes.push(gw);
    const peer = await startMeshNode({ name: 'meta-peer', ip: '127.0.42.32', seeds: [gw.gossip] });
    nodes.push(peer);
    await waitConverged(nodes);
    const roleOf = async () => (await getJson<{ members: { name: string; role: string }[] }>(`${peer.url}/v1/mesh`)).members.find((m) => m.name === 'becomes-node')?.role;
    assert.equal(await roleOf(), 'gateway');
    const file = path.join(path.dirname(gw.stateDir), 'viiwork.yaml');
    const doc = parse(fs.readFileSync(file, 'utf8'));
    fs.writeFileSync(file, stringify({ ...doc, models: [{ name: 'late', engine: 'sim', parallel: 1, sim }] }));
    gw.proc.kill('SIGHUP');
    await waitFor(async () => (await roleOf()) === 'node', { timeoutMs: 15_000, intervalMs: 100, what: 'the peer sees the new role' });
  });
});
