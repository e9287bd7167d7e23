/**
 * Kept over a restart (SPEC section 13, issue 43 item 3) against the real
 * llama-server on the tiny GGUF our own code writes: a conversation's turn,
 * then the node is stopped with SIGTERM and started again on the same
 * state_dir; the next turn finds most of its prompt cached (the engine's own
 * count in `usage`), and the node priced it warm (its prediction in the
 * decision feed). A restart with another context drops the saved file and
 * the next turn is cold.
 *
 * Runs against the engine test/helpers/engine.ts finds; skips otherwise, fails under CI.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { request } from 'undici';
import { writeTinyGguf } from '../fakes/tiny-gguf.ts';
import { waitFor } from '../fakes/wait.ts';
import { getJson, startMeshNode, stopAll, type MeshNode } from '../helpers/mesh.ts';
import { tempDir } from '../helpers/node.ts';
import { realLlamaServer } from '../helpers/engine.ts';

const { binary: BINARY, skip } = realLlamaServer();

const IP = '127.0.202.1';

describe('slots kept over a restart, against the real llama-server', { skip }, () => {
  const dir = tempDir('viiwork-kept-');
  const model = writeTinyGguf(path.join(dir, 'tiny.gguf'), { contextLength: 2048 });
  const stateDir = path.join(dir, 'state');
  const entry = (context: number) => ({ name: 'tiny', engine: 'llamacpp', path: model, parallel: 2, context, llamacpp: { binary: BINARY, args: ['--threads', '1'] } });
  let node: MeshNode | undefined;
  let seen = 0;

  const start = async (context: number) => {
    node = await startMeshNode({ name: 'K', ip: IP, models: [entry(context)], stateDir });
    await waitFor(async () => ((await (await request(`${node!.url}/health`)).body.json()) as { serving: boolean }).serving, { timeoutMs: 60_000, what: 'llama-server serving' });
    seen = 0;
  };
  const restart = async (context: number) => {
    await node!.stop();
    assert.equal(await node!.exited, 0, node!.logs());
    await start(context);
  };
  after(() => stopAll([node]));

  // A long system prompt and a short reply: the turn after is mostly the prompt before it.
  const messages: { role: string; content: string }[] = [
    { role: 'system', content: 'You keep a ship log: every entry names the hour, the heading and the weather. '.repeat(6) },
    { role: 'user', content: 'Entry one: we left the harbour at dawn.' },
  ];

  async function ask(): Promise<{ prompt: number; cached: number; predicted: number; reply: string }> {
    const body = { model: 'tiny', messages, max_tokens: 6, temperature: 0, grammar: 'root ::= [a-z ]+' };
    const r = await request(`${node!.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const text = await r.body.text();
    assert.equal(r.statusCode, 200, text);
    const doc = JSON.parse(text);
    const feed = (await (await request(`${node!.url}/v1/decisions?since=${seen}`)).body.json()) as { last: number; data: { predicted_cached: number | null }[] };
    seen = feed.last;
    return {
      prompt: doc.usage.prompt_tokens,
      cached: doc.usage.prompt_tokens_details?.cached_tokens ?? 0,
      predicted: feed.data.at(-1)?.predicted_cached ?? 0,
      reply: doc.choices[0].message.content,
    };
  }

  it('the next turn after a restart finds most of its prompt cached, and the node priced it so', async () => {
    await start(2048);
    const first = await ask();
    assert.ok(first.prompt > 300, `a long enough prompt (${first.prompt} tokens)`);
    messages.push({ role: 'assistant', content: first.reply }, { role: 'user', content: 'Entry two: wind from the west.' });

    await restart(2048);
    assert.match(node!.logs(), /restored 1 slot\(s\)/);
    const next = await ask();
    assert.ok(next.cached >= 0.8 * first.prompt, `after the restart the engine reused ${next.cached} of ${next.prompt} prompt tokens (the turn before had ${first.prompt})`);
    assert.ok(next.predicted >= 0.8 * first.prompt, `the node priced ${next.predicted} tokens warm`);
    const left = fs.readdirSync(path.join(stateDir, 'slot-cache')).flatMap((d) => fs.readdirSync(path.join(stateDir, 'slot-cache', d)));
    assert.deepEqual(left, [], 'a restored file is removed');
  });

  it('a file saved under another context is dropped, not restored: the next turn is cold', async () => {
    messages.push({ role: 'assistant', content: 'noted' }, { role: 'user', content: 'Entry three: rain by noon.' });
    const warm = await ask();
    messages.push({ role: 'assistant', content: warm.reply }, { role: 'user', content: 'Entry four: the harbour lights.' });

    await restart(1536);
    assert.match(node!.logs(), /dropped b0-s\d\.bin: saved by another model file, context/);
    const cold = await ask();
    assert.ok(cold.cached < 0.2 * cold.prompt, `nothing restored: the engine reused ${cold.cached} of ${cold.prompt}`);
  });
});

describe('slots kept over an idle unload, against the real llama-server', { skip }, () => {
  const dir = tempDir('viiwork-kept-idle-');
  const model = writeTinyGguf(path.join(dir, 'tiny.gguf'), { contextLength: 2048 });
  let node: MeshNode | undefined;
  after(() => stopAll([node]));

  it('a model unloaded for idleness and loaded again finds its conversation warm', async () => {
    node = await startMeshNode({
      name: 'U',
      ip: '127.0.202.2',
      node: { memory_budget: '4GiB' },
      models: [{ name: 'tiny', engine: 'llamacpp', path: model, parallel: 1, context: 2048, load: 'on_demand', idle_unload: '1s', memory: '256MiB', llamacpp: { binary: BINARY, args: ['--threads', '1'] } }],
    });
    const messages: { role: string; content: string }[] = [
      { role: 'system', content: 'You keep a garden diary: what was sown, what was watered, what came up. '.repeat(6) },
      { role: 'user', content: 'Today the beans came up.' },
    ];
    const ask = async () => {
      const r = await request(`${node!.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'tiny', messages, max_tokens: 6, temperature: 0, grammar: 'root ::= [a-z ]+' }),
      });
      const text = await r.body.text();
      assert.equal(r.statusCode, 200, text);
      const doc = JSON.parse(text);
      return { prompt: doc.usage.prompt_tokens as number, cached: (doc.usage.prompt_tokens_details?.cached_tokens ?? 0) as number, reply: doc.choices[0].message.content as string };
    };
    const first = await ask();
    messages.push({ role: 'assistant', content: first.reply }, { role: 'user', content: 'Then it rained.' });
    const state = async () => ((await (await request(`${node!.url}/v1/capacity`)).body.json()) as { models: { targets: { state: string }[] }[] }).models[0].targets[0].state;
    await waitFor(async () => (await state()) === 'unloaded', { timeoutMs: 60_000, what: 'tiny unloaded for idleness' });
    assert.match(node.logs(), /tiny\/0 saved 1 slot\(s\)/);
    const next = await ask();
    assert.match(node.logs(), /tiny\/0 restored 1 slot\(s\)/);
    assert.ok(next.cached >= 0.8 * first.prompt, `after the unload and load the engine reused ${next.cached} of ${next.prompt} (the turn before had ${first.prompt})`);
  });
});

describe('a session whose home restarts, through a gateway, against the real llama-server', { skip }, () => {
  const dir = tempDir('viiwork-kept-mesh-');
  const model = writeTinyGguf(path.join(dir, 'tiny.gguf'), { contextLength: 2048 });
  const spec = (name: string, n: number) => ({
    name,
    ip: `127.0.202.${n}`,
    stateDir: path.join(dir, `state-${name}`),
    models: [{ name: 'tiny', engine: 'llamacpp', path: model, parallel: 1, context: 2048, llamacpp: { binary: BINARY, args: ['--threads', '1'] } }],
  });
  const nodes: MeshNode[] = [];
  after(() => stopAll(nodes));

  it('the turn after its home drained and came back runs there again and finds its prompt cached', async () => {
    const g = await startMeshNode({ name: 'G', ip: '127.0.202.10' });
    nodes.push(g);
    for (const [name, n] of [['A', 11], ['B', 12]] as const) nodes.push(await startMeshNode({ ...spec(name, n), seeds: [g.gossip] }));
    const fleetHas = async (hosts: string[]) => {
      const doc = (await (await request(`${g.url}/v1/fleet/capacity`)).body.json()) as { models: { name: string; hosts: { node: string; fresh: boolean; slots: number }[] }[] };
      return hosts.every((h) => doc.models.find((m) => m.name === 'tiny')?.hosts.some((x) => x.node === h && x.fresh && x.slots > 0));
    };
    await waitFor(() => fleetHas(['A', 'B']), { timeoutMs: 60_000, what: 'G sees tiny on A and B' });

    const messages: { role: string; content: string }[] = [
      { role: 'system', content: 'You plan a walking tour: each stop, how far, and what to see there. '.repeat(6) },
      { role: 'user', content: 'Start at the old bridge.' },
    ];
    const ask = async () => {
      const r = await request(`${g.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-session-id': 'walking-tour' },
        body: JSON.stringify({ model: 'tiny', messages, max_tokens: 6, temperature: 0, grammar: 'root ::= [a-z ]+' }),
      });
      const text = await r.body.text();
      assert.equal(r.statusCode, 200, text);
      const doc = JSON.parse(text);
      return { host: String(r.headers['x-viiwork-node']), prompt: doc.usage.prompt_tokens as number, cached: (doc.usage.prompt_tokens_details?.cached_tokens ?? 0) as number, reply: doc.choices[0].message.content as string };
    };
    const first = await ask();
    messages.push({ role: 'assistant', content: first.reply }, { role: 'user', content: 'Then the market square.' });

    const i = nodes.findIndex((n) => n.name === first.host);
    const home = nodes[i];
    await home.stop();
    assert.equal(await home.exited, 0, home.logs());
    nodes[i] = await startMeshNode({ ...spec(home.name, home.name === 'A' ? 11 : 12), seeds: [g.gossip] });
    await waitFor(() => fleetHas(['A', 'B']), { timeoutMs: 60_000, what: `G sees tiny on ${home.name} again` });
    assert.match(nodes[i].logs(), /restored 1 slot\(s\)/);

    const seen = (await getJson<{ last: number }>(`${g.url}/v1/decisions`)).last;
    const next = await ask();
    if (next.host !== first.host) {
      // What G knew when it moved the turn: its decision, the candidates it priced, and its view of the fleet.
      const row = (await getJson(`${g.url}/v1/decisions?since=${seen}`)).data.find((d: any) => d.entry === 'G');
      const timeline = row?.timeline ? await getJson(`${g.url}/v1/timeline/${row.timeline}`) : undefined;
      const fleet = (await getJson(`${g.url}/v1/fleet/capacity`)).models;
      assert.fail(`the session went back to its home ${first.host}, not ${next.host}: ${JSON.stringify({ row, timeline, fleet })}`);
    }
    assert.ok(next.cached >= 0.8 * first.prompt, `its home reused ${next.cached} of ${next.prompt} prompt tokens after the restart (the turn before had ${first.prompt})`);
  });
});
