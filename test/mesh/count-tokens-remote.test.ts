/**
 * SPEC section 4: count_tokens counts with the tokenizer of an engine serving
 * the model. A gateway (no models) in front of a member running the real
 * llama-server asks that member, whose llama-server tokenizes, rather than
 * answering with its own estimate; it takes no slot there. Skips when the
 * engine is absent (test/helpers/engine.ts; under CI it fails instead).
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
import { realLlamaServer } from '../helpers/engine.ts';

const { binary: BINARY, skip } = realLlamaServer();
const IP = (n: number) => `127.0.173.${n}`;
/** The slow-tokenizer case's own addresses. */
const IP_SLOW = (n: number) => `127.0.242.${n}`;
/** The fake llama-server's /tokenize answers after this long: past the forward's quiet watch (200 ms). */
const TOKENIZE_MS = 1200;

async function count(url: string, body: unknown): Promise<{ status: number; node: string; tokens: number }> {
  const r = await request(`${url}/v1/messages/count_tokens`, { method: 'POST', headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' }, body: JSON.stringify(body) });
  const doc = (await r.body.json()) as { input_tokens: number };
  return { status: r.statusCode, node: String(r.headers['x-viiwork-node']), tokens: doc.input_tokens };
}

/** Until `gateway` has seen `member` serve tiny (slots up) in a report that is now stale: no request has made it routed. */
async function staleReport(gateway: MeshNode, member: string): Promise<void> {
  await waitFor(
    async () => {
      const m = (await getJson(`${gateway.url}/v1/fleet/capacity`)).models.find((x: any) => x.name === 'tiny');
      return m?.hosts.some((h: any) => h.node === member && h.slots > 0 && h.fresh === false);
    },
    { timeoutMs: 60_000, intervalMs: 250, what: `the gateway's report of ${member} healthy, and stale` },
  );
}

describe('count_tokens through a gateway', { skip }, () => {
  const dir = tempDir('vw-count-');
  const model = writeTinyGguf(path.join(dir, 'tiny.gguf'), { seed: 7 });
  const nodes: MeshNode[] = [];

  before(async () => {
    const env = { VIIWORK_MESH_SECRET: crypto.randomBytes(32).toString('base64') };
    await startSeeded(nodes, [
      { name: 'ct-x', ip: IP(1), env, models: [{ name: 'tiny', engine: 'llamacpp', path: model, parallel: 1, context: 256, workloads: ['chat'], llamacpp: { binary: BINARY, args: ['-t', '1'] } }] },
      // The product's background polling: a member this gateway does not route to yet is polled every 10 s, its report stale between.
      { name: 'ct-g', ip: IP(2), env, mesh: { capacity_background: '10s' } },
    ]);
  });
  after(async () => {
    await stopAll(nodes);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it("the gateway's count is the serving member's llama-server count, not an estimate, even from a stale report", async () => {
    const body = { model: 'tiny', system: 'count me', messages: [{ role: 'user', content: 'one two three four five six' }] };
    const atMember = await count(nodes[0].url, body);
    assert.equal(atMember.status, 200);
    // The gateway has seen ct-x serve tiny (slots up) in a report that is now stale: no request has made it routed.
    await staleReport(nodes[1], 'ct-x');
    const viaGateway = await count(nodes[1].url, body);
    assert.equal(viaGateway.status, 200);
    assert.equal(viaGateway.node, 'ct-x', 'counted by the member, not estimated at the gateway');
    assert.equal(viaGateway.tokens, atMember.tokens);
    const chat = messagesToChat(body as never);
    assert.ok(chat.ok);
    // The tiny vocabulary is mostly single characters: a tokenizer's count is far above the bytes ÷ 4 estimate.
    assert.ok(viaGateway.tokens > Buffer.byteLength(countText(chat.chat)) / 2, `${viaGateway.tokens} tokens`);
  });
});

/**
 * The same from a stale report, on the fake llama-server (no real engine needed). A tokenizer slower than the
 * forward's watch over a quiet member (200 ms) still answers: the forward was
 * sent on a stale report, so that staleness is no sign the member went quiet
 * (it has `stale_after` from its own start). Found beside two CPU burners,
 * where the real llama-server's /tokenize took that long; here the fake
 * llama-server's /tokenize answers after 1.2 s, every run.
 */
describe('count_tokens through a gateway, from a stale report, with a slow tokenizer', () => {
  const dir = tempDir('vw-count-stale-');
  const model = writeTinyGguf(path.join(dir, 'tiny.gguf'), { seed: 11 });
  const nodes: MeshNode[] = [];

  before(async () => {
    const env = { VIIWORK_MESH_SECRET: crypto.randomBytes(32).toString('base64') };
    await startSeeded(nodes, [
      {
        name: 'cs-x',
        ip: IP_SLOW(1),
        env: { ...env, FAKE_TOKENIZE_MS: String(TOKENIZE_MS) },
        models: [{ name: 'tiny', engine: 'llamacpp', path: model, parallel: 1, workloads: ['chat'], llamacpp: { binary: FAKE_LLAMA_SERVER } }],
      },
      // Background polling only: between its polls (every 10 s) the gateway's report of cs-x is stale.
      { name: 'cs-g', ip: IP_SLOW(2), env, mesh: { capacity_background: '10s' } },
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
    await staleReport(nodes[1], 'cs-x');
    const viaGateway = await count(nodes[1].url, body);
    assert.equal(viaGateway.status, 200);
    assert.equal(viaGateway.node, 'cs-x', 'counted by the member, not estimated at the gateway');
    assert.equal(viaGateway.tokens, characters);
  });
});
