/**
 * Issue 17, items 2–4, across a real two-node mesh: an entry node with no
 * engine, an executor with a sim engine (one llama-server-like slot). The
 * executor records what it sent its engine, publishes it as a cache digest
 * (resent only when it changed), tells the entry the engine's own cached
 * count (a header on whole answers, a trailer on streams), and both ends
 * show predicted against actual in the decision feed and /metrics.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { decodeLinks } from '../../src/capacity/digest.ts';
import { scanJsonObject } from '../../src/http/json-scan.ts';
import { prefixChain } from '../../src/prompt/chain.ts';
import { waitFor } from '../fakes/wait.ts';
import { getJson, startMeshNode, stopAll, waitConverged, waitModelOn, type MeshNode } from '../helpers/mesh.ts';

const IP = (n: number) => `127.0.120.${n}`;
const SYSTEM = 'You are a careful assistant. '.repeat(40);

function turn(n: number, extra: Record<string, unknown> = {}) {
  const messages: { role: string; content: string }[] = [{ role: 'system', content: SYSTEM }];
  for (let i = 1; i <= n; i++) {
    messages.push({ role: 'user', content: `question ${i} about the weather in town ${i}` });
    if (i < n) messages.push({ role: 'assistant', content: `answer ${i}` });
  }
  return { model: 'm', messages, ...extra };
}

function chainOf(body: object) {
  const buf = Buffer.from(JSON.stringify(body));
  const scan = scanJsonObject(buf);
  assert.ok(scan.ok);
  return prefixChain(buf, scan.object, 'chat');
}

async function send(url: string, body: object): Promise<{ status: number; headers: Record<string, unknown>; trailers: Record<string, string>; text: string }> {
  const r = await request(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await r.body.text();
  return { status: r.statusCode, headers: r.headers, trailers: r.trailers, text };
}

describe('cache digests and cached-token feedback across a mesh', () => {
  let entry: MeshNode, exec: MeshNode;
  before(async () => {
    exec = await startMeshNode({
      name: 'exec',
      ip: IP(2),
      models: [{ name: 'm', engine: 'sim', parallel: 1, sim: { ttft_ms: 2, prefill_ms_per_1k: 5, tokens_per_s: 2000, output_tokens: 4 } }],
    });
    entry = await startMeshNode({ name: 'entry', ip: IP(1), seeds: [exec.gossip] });
    await waitConverged([entry, exec]);
    await waitModelOn(entry, 'm', ['exec']);
  });
  after(() => stopAll([entry, exec]));

  it("turns of one conversation: the engine's count comes back as a header (whole) and a trailer (stream); the digest holds the conversation", async () => {
    const first = await send(entry.url, turn(1));
    assert.equal(first.status, 200, first.text);
    assert.equal(first.headers['x-viiwork-node'], 'exec');
    assert.equal(first.headers['x-viiwork-cached-tokens'], '0', 'a cold slot: nothing cached, said in a header');

    const second = await send(entry.url, turn(2, { stream: true, stream_options: { include_usage: true } }));
    assert.equal(second.status, 200, second.text);
    assert.equal(second.headers['x-viiwork-cached-tokens'], undefined, 'a stream cannot know it before its headers');
    const cached = Number(second.trailers['x-viiwork-cached-tokens']);
    const engineCount = JSON.parse(
      second.text
        .split('\n')
        .filter((l) => l.startsWith('data: {') && l.includes('"usage"'))
        .at(-1)!
        .slice(6),
    ).usage.prompt_tokens_details.cached_tokens;
    assert.ok(cached > 0, `the second turn reused the first one's prompt (trailer ${cached})`);
    assert.equal(cached, engineCount, 'the trailer is the engine’s own count');

    // The executor’s digest holds the second turn’s conversation, in the engine’s tokens.
    const report = await getJson(`${exec.url}/v1/capacity`);
    const target = report.models.find((m: { name: string }) => m.name === 'm').targets[0];
    assert.ok(target.digest?.links, 'a digest with links');
    const digest = decodeLinks(target.digest.v, target.digest.links)!;
    const chain = chainOf(turn(2));
    // The digest publishes a sample of a slot's links (the last ones, ever further back, and the first:
    // engines/cache-model.ts sampledIndices), now with the reply's link after the prompt's: the second turn's last
    // link (what its next turn continues) and its first (what an edit or a shared system prompt finds) among them.
    assert.ok(digest.held.has(chain[chain.length - 1].hash), `the turn's last link is held: ${JSON.stringify([...digest.held])}`);
    assert.ok(digest.held.has(chain[0].hash), 'its first link is held');
    const extra = [...digest.held.keys()].filter((h) => !chain.some((l) => l.hash === h));
    assert.ok(extra.length <= 1, `beyond the prompt's links, at most the reply's: ${extra}`);
    assert.ok(JSON.stringify(target.digest).length <= 16 * 1024);

    // Unchanged since the version a poll holds: the digest is not sent again; after a change it is.
    const held = `${report.digest_epoch}.${report.digest_version}`;
    const again = await getJson(`${exec.url}/v1/capacity?digests=${held}`);
    assert.deepEqual(again.models[0].targets[0].digest, { v: target.digest.v });
    const stranger = await getJson(`${exec.url}/v1/capacity?digests=00000000.${report.digest_version}`);
    assert.ok(stranger.models[0].targets[0].digest.links, 'another epoch (a restarted executor) gets everything');
    assert.equal((await send(entry.url, turn(3))).status, 200);
    const changed = await getJson(`${exec.url}/v1/capacity?digests=${held}`);
    assert.ok(changed.models[0].targets[0].digest.links, 'changed: sent again');
    assert.ok(changed.models[0].targets[0].digest.v > target.digest.v);
  });

  it('the decision feed and /metrics show predicted and actual cached tokens', async () => {
    // The entry's view of the executor carries its digest: a later turn is predicted warm there.
    await waitFor(
      async () => {
        const r = await send(entry.url, turn(4));
        assert.equal(r.status, 200);
        const feed = await getJson<{ data: { entry: string; predicted_cached: number | null; cached_tokens: number | null }[] }>(`${entry.url}/v1/decisions?since=0`);
        const last = feed.data.filter((d) => d.entry === 'entry').at(-1)!;
        return last.cached_tokens !== null && last.cached_tokens > 0 && (last.predicted_cached ?? 0) > 0;
      },
      { timeoutMs: 15_000, what: 'a request predicted and reported warm in the entry’s feed' },
    );
    const feed = await getJson<{ data: { entry: string; executor: string; predicted_cached: number | null; cached_tokens: number | null }[] }>(`${exec.url}/v1/decisions?since=0`);
    assert.ok(feed.data.some((d) => d.entry === 'entry' && d.executor === 'exec' && d.cached_tokens !== null && d.predicted_cached !== null), 'the executor records its own prediction and the count');

    const execMetrics = await (await request(`${exec.url}/metrics`)).body.text();
    const cachedLine = execMetrics.split('\n').find((l) => l.startsWith('viiwork_prompt_tokens_total{') && l.includes('cache="cached"') && l.includes('host="exec"'));
    assert.ok(cachedLine && Number(cachedLine.split(' ').at(-1)) > 0, `cached prompt tokens counted: ${cachedLine}`);
    assert.ok(execMetrics.split('\n').some((l) => l.startsWith('viiwork_prompt_tokens_total{') && l.includes('cache="uncached"')));
    const entryMetrics = await (await request(`${entry.url}/metrics`)).body.text();
    assert.match(entryMetrics, /viiwork_cache_prediction_error_tokens_count\{model="m",host="exec"\} [1-9]/);
    assert.match(entryMetrics, /viiwork_cached_tokens_total\{model="m",host="exec",source="engine"\} [1-9]/);
  });
});
