/**
 * A drain's hand-off (SPEC section 13, "Drain"; files/hand-off.ts) against
 * the real llama-server, each node with one slot and the engine's RAM
 * prompt cache (the product's default):
 * - a conversation the draining node's engine had already moved from its
 *   slot to RAM (another conversation took the slot) is handed on too, and
 *   its next turn finds its cache on the member;
 * - the member that takes a hand-off keeps its own live conversation (the
 *   engine's restore overwrites a slot: the node parks the slot's prompt in
 *   RAM first), so that conversation's next turn finds its cache as well;
 * - a member that refuses a take (its only slot busy) is asked again once it
 *   has one free, and the conversation still arrives.
 * Clients enter through G (no models); the mid GGUF of cache-move-llama.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { waitFor } from '../fakes/wait.ts';
import { getJson, stopAll, type MeshNode } from '../helpers/mesh.ts';
import { tempDir } from '../helpers/node.ts';
import { realLlamaServer } from '../helpers/engine.ts';
import { ask, midModel, startGatewayAndPair, tinyServing } from '../helpers/mid-model.ts';

const { skip } = realLlamaServer();

type Msg = { role: string; content: string };

/** A conversation's opening of about 900 tokens, its own from the first character. */
function opening(name: string): Msg[] {
  const log = Array.from({ length: 30 }, (_, i) => `${name} log ${i + 1}: checked the rigging, all fast. `).join('').slice(0, 900);
  return [
    { role: 'system', content: `${name} keeps this log. ${log}` },
    { role: 'user', content: `${name}: first entry.` },
  ];
}

async function turn(url: string, messages: Msg[], host?: string) {
  const t = await ask(url, messages, host);
  messages.push({ role: 'assistant', content: t.reply }, { role: 'user', content: `entry after ${t.prompt} tokens` });
  return t;
}


const gone = async (g: MeshNode, name: string) => !(await getJson(`${g.url}/v1/fleet/capacity`)).models.find((m: any) => m.name === 'tiny')?.hosts.some((h: any) => h.node === name && h.fresh);

describe('a drain hands on what its engine holds in RAM, and the taker keeps its own', { skip }, () => {
  const dir = tempDir('viiwork-hand-off-');
  const file = midModel(dir);
  const nodes: MeshNode[] = [];
  let g: MeshNode;
  let a: MeshNode;
  let b: MeshNode;
  const x = opening('Xavier');
  const y = opening('Yvonne');
  const z = opening('Zora');
  const first: Record<string, number> = {};

  before(async () => {
    ({ g, a, b } = await startGatewayAndPair(nodes, '127.0.220', ['A', 'B'], file));
    // B's own conversation; then X on A, and Y on A after it (A's one slot gives X up to its engine's RAM).
    first.z = (await turn(g.url, z, 'B')).prompt;
    first.x = (await turn(g.url, x, 'A')).prompt;
    first.y = (await turn(g.url, y, 'A')).prompt;
    // SIGTERM drains A: its conversations go to B, then it leaves.
    await a.stop();
    assert.equal(await a.exited, 0, a.logs());
    await waitFor(() => gone(g, 'A'), { timeoutMs: 30_000, what: 'G no longer routes to A' });
  });
  after(() => stopAll(nodes));

  it('hands on the conversation its engine had moved to RAM: its next turn finds its cache on the member', async () => {
    const next = await ask(g.url, x);
    assert.equal(next.host, 'B');
    assert.ok(next.cached >= 0.95 * first.x, `B reused ${next.cached} of ${next.prompt} prompt tokens; X's last prompt was ${first.x}\n--- A ---\n${a.logs().slice(-3000)}\n--- B ---\n${b.logs().slice(-3000)}`);
    const other = await ask(g.url, y);
    assert.ok(other.cached >= 0.95 * first.y, `Y: B reused ${other.cached} of ${other.prompt}; its last prompt was ${first.y}`);
    assert.match(a.logs(), /handed 2 conversation\(s\) to members with their caches \(1 brought back from the engine's RAM first\)/, a.logs().slice(-4000));
  });

  it("keeps the taker's own conversation: its next turn still finds its cache", async () => {
    const next = await ask(g.url, z);
    assert.equal(next.host, 'B');
    assert.ok(next.cached >= 0.95 * first.z, `B reused ${next.cached} of ${next.prompt} prompt tokens of its own conversation (${first.z} before the hand-off)\n--- B ---\n${b.logs().slice(-3000)}`);
  });
});

describe('a refused take is asked again', { skip }, () => {
  const dir = tempDir('viiwork-hand-off-retry-');
  const file = midModel(dir);
  const nodes: MeshNode[] = [];
  after(() => stopAll(nodes));

  it('a member whose only slot is busy when the drain begins still takes the conversation once the slot frees', async () => {
    const { g, a, b: c } = await startGatewayAndPair(nodes, '127.0.221', ['A', 'C'], file);
    const x = opening('Xavier');
    const prompt = (await turn(g.url, x, 'A')).prompt;
    // A long answer holds C's only slot while A drains.
    const long = new AbortController();
    const body = { model: 'tiny', stream: true, max_tokens: 4000, temperature: 0, messages: [{ role: 'user', content: 'Write a very long story.' }] };
    const held = request(`${c.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: long.signal }).then(
      async (r) => {
        for await (const _ of r.body) if (long.signal.aborted) break;
      },
      () => undefined,
    );
    held.catch(() => undefined);
    const cBusy = async () => (await getJson(`${a.url}/v1/fleet/capacity`)).models.find((m: any) => m.name === 'tiny')?.hosts.some((h: any) => h.node === 'C' && h.busy >= 1);
    await waitFor(cBusy, { timeoutMs: 30_000, what: "A's view shows C's slot busy" });
    const stopped = a.stop();
    // Once C has refused (or A is gone without asking), the long answer ends and the slot frees.
    await waitFor(() => /C did not take a conversation/.test(a.logs()) || /backend tiny\/0 healthy → stopped/.test(a.logs()), { timeoutMs: 60_000, what: 'A asks C to take its conversation' });
    long.abort();
    await held.catch(() => undefined);
    await stopped;
    assert.equal(await a.exited, 0, a.logs());
    await waitFor(() => gone(g, 'A'), { timeoutMs: 30_000, what: 'G no longer routes to A' });
    const next = await ask(g.url, x);
    assert.equal(next.host, 'C');
    assert.ok(next.cached >= 0.95 * prompt, `C reused ${next.cached} of ${next.prompt} prompt tokens; X's last prompt was ${prompt}\n--- A ---\n${a.logs().slice(-3000)}`);
    assert.match(a.logs(), /handed 1 conversation\(s\)/, a.logs().slice(-3000));
  });
});
