/**
 * SPEC section 4: count_tokens counts with the tokenizer of an engine serving
 * the model, and a gateway asks a member for it even from a stale report (a
 * member polled only in the background). A tokenizer slower than the
 * forward's watch over a quiet member (200 ms) still answers: the forward was
 * sent on a stale report, so that staleness is no sign the member went quiet
 * (it has `stale_after` from its own start). Found beside two CPU burners,
 * where the real llama-server's /tokenize took that long; here the fake
 * llama-server's /tokenize answers after 1.2 s, every run.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { countText, messagesToChat } from '../../src/messages/index.ts';
import { FAKE_LLAMA_SERVER } from '../fakes/fake-engine.ts';
import { writeTinyGguf } from '../fakes/tiny-gguf.ts';
import { waitFor } from '../fakes/wait.ts';
import { getJson, startSeeded, stopAll, type MeshNode } from '../helpers/mesh.ts';
import { tempDir } from '../helpers/node.ts';

const IP = (n: number) => `127.0.242.${n}`;
const TOKENIZE_MS = 1200;

async function count(url: string, body: unknown): Promise<{ status: number; node: string; tokens: number }> {
  const r = await request(`${url}/v1/messages/count_tokens`, { method: 'POST', headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' }, body: JSON.stringify(body) });
  const doc = (await r.body.json()) as { input_tokens: number };
  return { status: r.statusCode, node: String(r.headers['x-viiwork-node']), tokens: doc.input_tokens };
}

describe('count_tokens through a gateway, from a stale report, with a slow tokenizer', () => {
  const dir = tempDir('vw-count-stale-');
  const model = writeTinyGguf(path.join(dir, 'tiny.gguf'), { seed: 11 });
  const nodes: MeshNode[] = [];

  before(async () => {
    const env = { VIIWORK_MESH_SECRET: crypto.randomBytes(32).toString('base64') };
    await startSeeded(nodes, [
      {
        name: 'cs-x',
        ip: IP(1),
        env: { ...env, FAKE_TOKENIZE_MS: String(TOKENIZE_MS) },
        models: [{ name: 'tiny', engine: 'llamacpp', path: model, parallel: 1, workloads: ['chat'], llamacpp: { binary: FAKE_LLAMA_SERVER } }],
      },
      // Background polling only: between its polls (every 10 s) the gateway's report of cs-x is stale.
      { name: 'cs-g', ip: IP(2), env, mesh: { capacity_background: '10s' } },
    ]);
  });
  after(async () => {
    await stopAll(nodes);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it("the gateway's count is the member's tokenizer count, not the gateway's estimate", async () => {
    const body = { model: 'tiny', system: 'count me', messages: [{ role: 'user', content: 'one two three four five six' }] };
    const chat = messagesToChat(body as never);
    assert.ok(chat.ok);
    // The fake tokenizer gives one token per character: four times the bytes ÷ 4 estimate.
    const characters = [...countText(chat.chat)].length;
    await waitFor(
      async () => {
        const m = (await getJson(`${nodes[1].url}/v1/fleet/capacity`)).models.find((x: any) => x.name === 'tiny');
        return m?.hosts.some((h: any) => h.node === 'cs-x' && h.slots > 0 && h.fresh === false);
      },
      { timeoutMs: 60_000, intervalMs: 250, what: "the gateway's report of cs-x healthy, and stale" },
    );
    const viaGateway = await count(nodes[1].url, body);
    assert.equal(viaGateway.status, 200);
    assert.equal(viaGateway.node, 'cs-x', 'counted by the member, not estimated at the gateway');
    assert.equal(viaGateway.tokens, characters);
  });
});
