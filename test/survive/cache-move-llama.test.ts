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
import { writeTinyGguf } from '../fakes/tiny-gguf.ts';
import { waitFor } from '../fakes/wait.ts';
import { realLlamaServer } from '../helpers/engine.ts';
import { getJson, startMeshNode, stopAll, waitModelOn, waitSeesFile, type MeshNode } from '../helpers/mesh.ts';
import { tempDir } from '../helpers/node.ts';

const { binary: BINARY, skip } = realLlamaServer();

const SHAPE = { nEmbd: 512, nLayers: 4, nHeads: 8, nFf: 4096, contextLength: 4096 };

/** About 2k tokens of system prompt (the tiny vocabulary spells most text a character a token). */
const LOG = Array.from({ length: 40 }, (_, i) => `Day ${i + 1}: the ship sailed on, wind steady. `).join('').slice(0, 1900);

export function midModel(dir: string, seed = 1): string {
  return writeTinyGguf(path.join(dir, `mid-${seed}.gguf`), { ...SHAPE, seed });
}

export const entryOf = (file: string, context = 4096) => ({ name: 'tiny', engine: 'llamacpp', path: file, parallel: 1, context, llamacpp: { binary: BINARY, args: ['--threads', '1'] } });

interface Turn {
  host: string;
  prompt: number;
  cached: number;
  reply: string;
}

export async function ask(url: string, messages: { role: string; content: string }[], host?: string): Promise<Turn> {
  const body = { model: 'tiny', messages, max_tokens: 4, temperature: 0, grammar: 'root ::= [a-z ]+' };
  const r = await request(`${url}/v1/chat/completions${host ? `?host=${host}` : ''}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await r.body.text();
  assert.equal(r.statusCode, 200, text);
  const doc = JSON.parse(text);
  return { host: String(r.headers['x-viiwork-node']), prompt: doc.usage.prompt_tokens, cached: doc.usage.prompt_tokens_details?.cached_tokens ?? 0, reply: doc.choices[0].message.content };
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
    await waitSeesFile(a, 'tiny', 'B', undefined, 90_000);
    await waitSeesFile(a, 'tiny', 'A', undefined, 90_000);
    await waitFor(async () => (await getJson(`${a.url}/v1/fleet/capacity`)).models.find((m: any) => m.name === 'tiny')?.hosts.filter((h: any) => h.fresh && h.slots > 0).length === 2, { timeoutMs: 90_000, what: 'A sees tiny serving on A and B' });
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
      const r = await request(`${a.url}/v1/slot-cache/save`, { method: 'POST', dispatcher: from, headers: { 'content-type': 'application/json', 'x-viiwork-node': 'F' }, body: JSON.stringify({ model: 'tiny', link, fingerprint }) });
      return { status: r.statusCode, text: await r.body.text() };
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
    const g = await startMeshNode({ name: 'G', ip: '127.0.215.10' });
    nodes.push(g);
    const a = await startMeshNode({ name: 'A2', ip: '127.0.215.11', models: [entryOf(file)], seeds: [g.gossip] });
    const b = await startMeshNode({ name: 'B2', ip: '127.0.215.12', models: [entryOf(file)], seeds: [g.gossip] });
    nodes.push(a, b);
    await waitSeesFile(a, 'tiny', 'B2', undefined, 90_000);
    await waitSeesFile(a, 'tiny', 'A2', undefined, 90_000);
    await waitFor(async () => (await getJson(`${g.url}/v1/fleet/capacity`)).models.find((m: any) => m.name === 'tiny')?.hosts.filter((h: any) => h.fresh && h.slots > 0).length === 2, { timeoutMs: 90_000, what: 'G sees tiny on A2 and B2' });
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
