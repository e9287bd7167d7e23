/**
 * Moving a cache (SPEC section 13, issue 43 item 1) against the real
 * llama-server: a conversation of about 2k tokens runs on A; its next turn
 * is sent to B (pinned there, as when A is full, draining or unloading);
 * B takes A's slot (A saves it, the file travels over the signed files
 * path, B restores it into the slot the turn takes) and the engine reports
 * nearly all of the moved prompt cached. A move that would cross model files
 * or contexts is refused by the holder; a take from a non-member is refused.
 *
 * The model is a "mid" GGUF our own code writes (4 layers, n_embd 512): its
 * prefill on one thread takes seconds, its KV a few MiB, as a real model on
 * a CPU host. Runs against the engine test/helpers/engine.ts finds.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Agent, request } from 'undici';
import { startFakePeer, type FakePeer } from '../fakes/fake-peer.ts';
import { waitFor } from '../fakes/wait.ts';
import { realLlamaServer } from '../helpers/engine.ts';
import { getJson, startMeshNode, stopAll, waitModelOn, type MeshNode } from '../helpers/mesh.ts';
import { tempDir } from '../helpers/node.ts';
import { ask, entryOf, midModel, startGatewayAndPair, waitTinyServing } from '../helpers/mid-model.ts';

const { skip } = realLlamaServer();

/** About 2k tokens of system prompt (the tiny vocabulary spells most text a character a token). */
const LOG = Array.from({ length: 40 }, (_, i) => `Day ${i + 1}: the ship sailed on, wind steady. `).join('').slice(0, 1900);

/**
 * A call as the fake member F, from its address. The open mesh takes a member's call only while the callee sees it
 * alive: an in-process fake peer on a loaded machine answers a probe late now and then and is suspected for a moment
 * (the callee then rightly refuses it: 401 for a call, 403 for a file): asked again until it is taken as alive.
 */
async function asF(url: string, from: Agent, body?: unknown): Promise<{ status: number; body: Buffer }> {
  let out: { status: number; body: Buffer } | undefined;
  await waitFor(
    async () => {
      const headers: Record<string, string> = body === undefined ? { 'x-viiwork-node': 'F' } : { 'content-type': 'application/json', 'x-viiwork-node': 'F' };
      const r = await request(url, body === undefined ? { dispatcher: from, headers } : { method: 'POST', dispatcher: from, headers, body: JSON.stringify(body) });
      out = { status: r.statusCode, body: Buffer.from(await r.body.arrayBuffer()) };
      return !((out.status === 401 || out.status === 403) && /not an alive member \(suspect\)/.test(out.body.toString('utf8')));
    },
    { timeoutMs: 30_000, what: 'F taken as alive' },
  );
  return out!;
}

const metric = (text: string, line: RegExp) => Number(text.split('\n').find((l) => line.test(l))?.split(' ').at(-1) ?? 0);

describe('a conversation moved between two members, against the real llama-server', { skip }, () => {
  const dir = tempDir('viiwork-move-');
  const file = midModel(dir);
  const nodes: MeshNode[] = [];
  let peer: FakePeer | undefined;
  let a: MeshNode;
  let b: MeshNode;
  const messages = [
    { role: 'system', content: `You keep a ship log. ${LOG}` },
    { role: 'user', content: 'Entry one: we left the harbour at dawn.' },
  ];
  before(async () => {
    a = await startMeshNode({ name: 'A', ip: '127.0.215.1', models: [entryOf(file)] });
    nodes.push(a);
    b = await startMeshNode({ name: 'B', ip: '127.0.215.2', models: [entryOf(file)], seeds: [a.gossip] });
    nodes.push(b);
    // The hint needs both files hashed and published: a move is only between the same file.
    await waitTinyServing(a, [a, b]);
  });
  after(async () => {
    await peer?.close();
    await stopAll(nodes);
  });

  it('the next turn, run on another member, finds at least 95% of the moved prompt cached', async () => {
    const first = await ask(a.url, messages, 'A');
    assert.equal(first.host, 'A');
    assert.ok(first.prompt >= 1500, `a conversation of about 2k tokens (${first.prompt})`);
    messages.push({ role: 'assistant', content: first.reply }, { role: 'user', content: 'Entry two: wind from the west.' });
    // A's digest must show its slot idle and holding the prompt before the entry can name it: A is the entry, its view is of now.
    const next = await ask(a.url, messages, 'B');
    assert.equal(next.host, 'B');
    const feed = await getJson(`${b.url}/v1/decisions?since=0`);
    const d = feed.data.at(-1);
    assert.equal(d.move_outcome, 'moved', `B's feed: ${JSON.stringify(d)}\n--- B ---\n${b.logs().slice(-3000)}\n--- A ---\n${a.logs().slice(-3000)}`);
    assert.equal(d.moved_from, 'A');
    assert.ok(d.moved_bytes > 0 && d.moved_ms >= 0, JSON.stringify(d));
    assert.ok(next.cached >= 0.95 * d.moved_tokens, `B's engine reused ${next.cached} of ${next.prompt} prompt tokens; ${d.moved_tokens} were moved`);
    assert.ok(d.moved_tokens >= 0.95 * first.prompt, `moved ${d.moved_tokens} of the ${first.prompt} tokens A held`);
    // The entry's own feed says so too (the executor's X-Viiwork-Moved), beside where it sent the turn.
    const entry = (await getJson(`${a.url}/v1/decisions?since=0`)).data.filter((x: any) => x.executor === 'B').at(-1);
    assert.equal(entry?.move_outcome, 'moved', `A's feed: ${JSON.stringify(entry)}`);
    assert.equal(entry.moved_from, 'A');
    assert.equal(entry.moved_tokens, d.moved_tokens);
    const metrics = await (await request(`${b.url}/metrics`)).body.text();
    assert.equal(metric(metrics, /^viiwork_cache_moves_total\{model="tiny",outcome="moved"\}/), 1);
    assert.ok(metric(metrics, /^viiwork_cache_move_bytes_total\{direction="received"\}/) > 0);
    // Removed after the restore (B) and once sent whole (A).
    const moveFiles = (n: MeshNode) => fs.readdirSync(path.join(n.stateDir, 'slot-cache'), { recursive: true }).map(String).filter((f) => /move-/.test(f));
    assert.deepEqual(moveFiles(b), []);
    await waitFor(() => moveFiles(a).length === 0, { timeoutMs: 10_000, what: "A's sent file removed" });
  });

  it('the holder refuses a move across model files or contexts, and its slot stays', async () => {
    // A member asking (a made-up one, at its own address: the open mesh's proof of who asks).
    peer = await startFakePeer({ name: 'F', ip: '127.0.215.9', seed: a.gossip, models: [{ name: 'other', slots: 1, busy: 0 }] });
    await waitModelOn(a, 'other', ['F'], 30_000);
    const from = new Agent({ localAddress: '127.0.215.9' });
    const sha = createHash('sha256').update(fs.readFileSync(file)).digest('hex');
    const feed = await getJson(`${a.url}/v1/capacity`);
    // A digest slot on the wire: [last link's hash, its tokens, unique tokens, idle ms (-1 busy), …].
    const link = (feed.models[0].targets[0].digest.slots as unknown[][]).find((s) => s[0])?.[0] as string;
    const save = async (fingerprint: unknown) => {
      const r = await asF(`${a.url}/v1/slot-cache/save`, from, { model: 'tiny', link, fingerprint });
      return { status: r.status, text: r.body.toString('utf8') };
    };
    const other = await save({ sha256: 'f'.repeat(64), context: 4096, parallel: 1, args: [] });
    assert.equal(other.status, 409, other.text);
    assert.match(other.text, /another model file/);
    const ctx = await save({ sha256: sha, context: 2048, parallel: 1, args: [] });
    assert.equal(ctx.status, 409, ctx.text);
    assert.match(ctx.text, /another context/);
    await from.close();
    assert.doesNotMatch(a.logs(), /cache move: saved .* for F/);
  });

  it('one slot saved for two members at once is one file, fetched whole by both', async () => {
    // A turn's move and a drain's hand-off may ask for the same slot together: the same bytes, the same SHA-256.
    const from = new Agent({ localAddress: '127.0.215.9' });
    const sha = createHash('sha256').update(fs.readFileSync(file)).digest('hex');
    const build = /llama-server build (\S+)/.exec(a.logs())?.[1];
    const feed = await getJson(`${a.url}/v1/capacity`);
    const link = (feed.models[0].targets[0].digest.slots as unknown[][]).find((s) => s[0])?.[0] as string;
    const fingerprint = { sha256: sha, context: 4096, parallel: 1, args: ['--threads', '1'], ...(build ? { build } : {}) };
    const save = async () => {
      const r = await asF(`${a.url}/v1/slot-cache/save`, from, { model: 'tiny', link, fingerprint });
      const text = r.body.toString('utf8');
      assert.equal(r.status, 200, text);
      return JSON.parse(text) as { sha256: string; size: number };
    };
    const [one, two] = [await save(), await save()];
    assert.equal(one.sha256, two.sha256);
    for (const _ of [one, two]) {
      const { status, body } = await asF(`${a.url}/v1/files/${one.sha256}`, from);
      assert.equal(status, 200, body.toString('utf8').slice(0, 300));
      assert.equal(createHash('sha256').update(body).digest('hex'), one.sha256);
    }
    await from.close();
  });

  it("a slot taken by another conversation since the entry's view: the holder brings the prompt back from its engine's RAM, and keeps the other", async () => {
    const from = new Agent({ localAddress: '127.0.215.9' });
    const sha = createHash('sha256').update(fs.readFileSync(file)).digest('hex');
    const build = /llama-server build (\S+)/.exec(a.logs())?.[1];
    const slots = async () => (await getJson(`${a.url}/v1/capacity`)).models[0].targets[0].digest.slots as unknown[][];
    const link = (await slots()).find((s) => s[0])?.[0] as string;
    // Another conversation takes A's one slot: the engine moves the first to its RAM.
    const other = [{ role: 'user', content: `Another log altogether. ${LOG.slice(0, 800).split('').reverse().join('')}` }];
    const w = await ask(a.url, other, 'A');
    other.push({ role: 'assistant', content: w.reply }, { role: 'user', content: 'And then?' });
    await waitFor(async () => (await slots()).find((s) => s[0])?.[0] !== link, { timeoutMs: 10_000, what: "A's slot no longer holding the first conversation" });
    const fingerprint = { sha256: sha, context: 4096, parallel: 1, args: ['--threads', '1'], ...(build ? { build } : {}) };
    const r = await asF(`${a.url}/v1/slot-cache/save`, from, { model: 'tiny', link, fingerprint });
    const text = r.body.toString('utf8');
    assert.equal(r.status, 200, text);
    assert.ok(JSON.parse(text).tokens >= 1500, text.slice(0, 300));
    await from.close();
    // The conversation that held the slot went to RAM, not away: its next turn finds its cache.
    const next = await ask(a.url, other, 'A');
    assert.ok(next.cached >= 0.95 * w.prompt, `A reused ${next.cached} of ${next.prompt} prompt tokens; the other conversation's last prompt was ${w.prompt}`);
  });

  it('a take from a non-member, or from a member name at another address, restores nothing', async () => {
    const before = await (await request(`${b.url}/metrics`)).body.text();
    const stranger = await request(`${b.url}/v1/slot-cache/take`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'tiny', link: '0'.repeat(16), tokens: 2000 }) });
    assert.equal(stranger.statusCode, 403, await stranger.body.text());
    const posing = await request(`${b.url}/v1/slot-cache/take`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-viiwork-node': 'A' }, body: JSON.stringify({ model: 'tiny', link: '0'.repeat(16), tokens: 2000 }) });
    assert.equal(posing.statusCode, 401, await posing.body.text());
    const now = await (await request(`${b.url}/metrics`)).body.text();
    assert.equal(metric(now, /^viiwork_cache_moves_total\{model="tiny",outcome="moved"\}/), metric(before, /^viiwork_cache_moves_total\{model="tiny",outcome="moved"\}/));
  });
});


describe('a drain hands its conversations to members with their caches, against the real llama-server', { skip }, () => {
  const dir = tempDir('viiwork-move-drain-');
  const file = midModel(dir);
  const nodes: MeshNode[] = [];
  after(() => stopAll(nodes));

  it('the turn after its host drained runs on a member that already holds its prompt', async () => {
    const { g, a, b } = await startGatewayAndPair(nodes, '127.0.215', ['A2', 'B2'], file);
    const messages = [
      { role: 'system', content: `You keep a ship log. ${LOG}` },
      { role: 'user', content: 'Entry one: the pilot came aboard.' },
    ];
    const first = await ask(g.url, messages, 'A2');
    assert.equal(first.host, 'A2');
    messages.push({ role: 'assistant', content: first.reply }, { role: 'user', content: 'Entry two: the pilot left.' });

    // SIGTERM drains: A2 reports draining, its requests end, its conversations go to B2, then it leaves.
    await a.stop();
    assert.equal(await a.exited, 0, a.logs());
    assert.match(a.logs(), /handed 1 conversation\(s\) to members/, a.logs().slice(-3000));
    assert.match(b.logs(), /cache move: restored \d+ tokens .* from A2/);

    await waitFor(async () => !(await getJson(`${g.url}/v1/fleet/capacity`)).models.find((m: any) => m.name === 'tiny')?.hosts.some((h: any) => h.node === 'A2' && h.fresh), { timeoutMs: 30_000, what: 'G no longer routes to A2' });
    const next = await ask(g.url, messages);
    assert.equal(next.host, 'B2');
    assert.ok(next.cached >= 0.95 * first.prompt, `B2 reused ${next.cached} of ${next.prompt} prompt tokens (A2 held ${first.prompt})`);
  });
});

describe('a move to a host that holds an older part of the conversation, against the real llama-server', { skip }, () => {
  const dir = tempDir('viiwork-move-older-');
  const file = midModel(dir);
  const nodes: MeshNode[] = [];
  after(() => stopAll(nodes));

  it('the entry names the holder of the newer part even when its estimate of the prompt is below the engine’s count', async () => {
    // The tiny vocabulary spells about a character a token, four times the entry's estimate: the older part B holds
    // is then, in the engine's tokens, more than the whole prompt in the entry's.
    const a = await startMeshNode({ name: 'A', ip: '127.0.224.1', models: [entryOf(file)] });
    const b = await startMeshNode({ name: 'B', ip: '127.0.224.2', models: [entryOf(file)], seeds: [a.gossip] });
    nodes.push(a, b);
    await waitTinyServing(a, [a, b]);
    const messages = [
      { role: 'system', content: `You keep a ship log. ${LOG.slice(0, 900)}` },
      { role: 'user', content: 'Entry one: we left the harbour at dawn.' },
    ];
    const first = await ask(a.url, messages, 'B');
    messages.push({ role: 'assistant', content: first.reply }, { role: 'user', content: `Entry two, the long one: ${LOG.slice(0, 1500)}` });
    const second = await ask(a.url, messages, 'A');
    assert.equal(second.host, 'A');
    messages.push({ role: 'assistant', content: second.reply }, { role: 'user', content: 'Entry three: calm.' });
    // B holds the first turn's prompt, A the second's, 1,500 tokens longer: the turn pinned to B takes A's slot.
    const third = await ask(a.url, messages, 'B');
    assert.equal(third.host, 'B');
    const d = (await getJson(`${b.url}/v1/decisions?since=0`)).data.at(-1);
    assert.equal(d.move_outcome, 'moved', `B's feed: ${JSON.stringify(d)}`);
    assert.equal(d.moved_from, 'A');
    assert.ok(third.cached >= 0.95 * second.prompt, `B reused ${third.cached} of ${third.prompt} prompt tokens; A held ${second.prompt}`);
  });
});
