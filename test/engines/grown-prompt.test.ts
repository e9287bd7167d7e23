/**
 * A prompt that grew inside its last message (a chat whose last message was
 * extended, a completion prompt appended to short of a 1 KiB boundary, a
 * production trace's last 512-token block completed by the next turn) still
 * continues its slot: the node names that slot to the engine, which reuses
 * everything but the grown tail, and the node predicts so. Before, the node
 * saw the slot's last link missing from the chain, took it for another
 * conversation's and named an empty slot instead: the engine reused nothing.
 * A conversation that shares only the system prompt still leaves the slot
 * alone (issue 25).
 *
 * Against the sim engine (4 slots, told its slot as llama-server is) and
 * against the real llama-server (2 slots; skipped with a message when it is
 * not built, failed under CI).
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { writeTinyGguf } from '../fakes/tiny-gguf.ts';
import { waitFor } from '../fakes/wait.ts';
import { realLlamaServer } from '../helpers/engine.ts';
import { startNode, tempDir, type TestNode } from '../helpers/node.ts';

type Msg = { role: string; content: string };

interface Served {
  promptTokens: number;
  engineCached: number;
  predicted: number;
}

/** One request through the node, with what the engine reused and what the node predicted (its decision feed). */
async function serve(t: TestNode, model: string, body: Record<string, unknown>, completion = false): Promise<Served> {
  const r = await request(`${t.url}/v1/${completion ? 'completions' : 'chat/completions'}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model, max_tokens: 4, temperature: 0, ...body }) });
  const doc = (await r.body.json()) as { usage?: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number } }; timings?: { prompt_n?: number } };
  assert.equal(r.statusCode, 200, JSON.stringify(doc));
  const feed = (await (await request(`${t.url}/v1/decisions`)).body.json()) as { data: { predicted_cached: number | null }[] };
  const promptTokens = doc.usage!.prompt_tokens;
  const engineCached = doc.usage!.prompt_tokens_details?.cached_tokens ?? promptTokens - (doc.timings?.prompt_n ?? promptTokens);
  return { promptTokens, engineCached, predicted: feed.data.at(-1)!.predicted_cached ?? 0 };
}

const words = (seed: string, n: number) => Array.from({ length: n }, (_, i) => `${seed}${i}`).join(' ');

function checks(start: () => TestNode, model: string, sizes: { system: number; body: number; grow: number }) {
  const system = `You answer questions about rivers. ${words('rule', sizes.system)}`;
  const history: Msg[] = [
    { role: 'system', content: system },
    { role: 'user', content: `Tell me about the Danube. ${words('danube', sizes.body)}` },
    { role: 'assistant', content: `The Danube flows east. ${words('east', sizes.body)}` },
  ];

  it('a chat whose last message grew reuses its slot: all but the grown message cached, and predicted so', async () => {
    const t = start();
    const last = `And the Rhine? ${words('rhine', sizes.grow)}`;
    const first = await serve(t, model, { messages: [...history, { role: 'user', content: last }] });
    const grown = await serve(t, model, { messages: [...history, { role: 'user', content: `${last} ${words('more', sizes.grow)}` }] });
    // Everything before the last message is the same text: the engine keeps at least that much.
    assert.ok(grown.engineCached >= 0.6 * first.promptTokens, `the engine reused ${grown.engineCached} of the ${first.promptTokens} tokens the first request left`);
    assert.ok(Math.abs(grown.predicted - grown.engineCached) <= 0.15 * grown.promptTokens, `predicted ${grown.predicted}, the engine reused ${grown.engineCached} of ${grown.promptTokens}`);
  });

  it('a completion prompt appended to reuses its slot', async () => {
    const t = start();
    const prompt = `Rivers of Europe, an essay. ${words('essay', sizes.body * 4)}`;
    const first = await serve(t, model, { prompt }, true);
    const grown = await serve(t, model, { prompt: `${prompt} ${words('next', sizes.grow)}` }, true);
    assert.ok(grown.engineCached >= 0.6 * first.promptTokens, `the engine reused ${grown.engineCached} of the ${first.promptTokens} tokens the first request left`);
    assert.ok(Math.abs(grown.predicted - grown.engineCached) <= 0.15 * grown.promptTokens, `predicted ${grown.predicted}, the engine reused ${grown.engineCached} of ${grown.promptTokens}`);
  });

  it('another conversation sharing only the system prompt takes an empty slot, not that one', async () => {
    const t = start();
    const mine = [...history, { role: 'user', content: `And the Elbe? ${words('elbe', sizes.grow)}` }];
    await serve(t, model, { messages: mine });
    await serve(t, model, { messages: [{ role: 'system', content: system }, { role: 'user', content: `Tell me about the Nile. ${words('nile', sizes.body)}` }] });
    // The first conversation's next turn still finds its whole prompt.
    const again = await serve(t, model, { messages: [...mine, { role: 'assistant', content: 'The Elbe flows north.' }, { role: 'user', content: 'And the Oder?' }] });
    assert.ok(again.engineCached >= 0.8 * again.promptTokens - 40, `the engine reused ${again.engineCached} of ${again.promptTokens}`);
  });
}

describe('a grown prompt through a node, sim engine with 4 slots', () => {
  let t: TestNode;
  before(async () => {
    t = await startNode({ api: { host: '127.0.150.1' }, models: [{ name: 'sim', engine: 'sim', parallel: 4, sim: { ttft_ms: 1, prefill_ms_per_1k: 1, tokens_per_s: 5000, output_tokens: 4 } }] });
    await waitFor(() => t.node.backends[0].state === 'healthy', { what: 'sim healthy' });
  });
  after(() => t?.stop());
  checks(() => t, 'sim', { system: 60, body: 200, grow: 60 });
});

const { binary: BINARY, skip } = realLlamaServer();

describe('a grown prompt through a node, the real llama-server with 2 slots', { skip }, () => {
  let t: TestNode;
  before(async () => {
    const dir = tempDir('viiwork-grown-');
    const model = writeTinyGguf(path.join(dir, 'tiny.gguf'), { contextLength: 8192 });
    t = await startNode({
      api: { host: '127.0.150.2' },
      models: [{ name: 'tiny', engine: 'llamacpp', path: model, parallel: 2, context: 8192, llamacpp: { binary: BINARY, args: ['--threads', '1'] } }],
    });
    await waitFor(() => t.node.backends[0].state === 'healthy', { timeoutMs: 60_000, what: 'llama-server healthy' });
  });
  after(() => t?.stop());
  checks(() => t, 'tiny', { system: 20, body: 60, grow: 15 });
});
