/**
 * Capacity polling at scale (docs/decisions.md), over real HTTP: a node that
 * polls the members it does not route to only every `capacity_background`
 * still routes the first request for one of their models to them, after one
 * poll, not after a background interval; and keeps polling the members it
 * routes to every `capacity_poll`.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { waitFor } from '../fakes/wait.ts';
import { getJson, postJson as post, startMeshNode, stopAll, waitConverged, type MeshNode } from '../helpers/mesh.ts';

const IP = (n: number) => `127.0.68.${n}`;
const sim = { ttft_ms: 5, prefill_ms_per_1k: 1, tokens_per_s: 2000, output_tokens: 2 };
const chat = (model: string) => ({ model, messages: [{ role: 'user', content: 'hi' }] });
/** Far longer than anything this test waits: a request that waited for a background poll would time out first. */
const BACKGROUND_MS = 120_000;

type Fleet = { models: { name: string; hosts: { node: string; fresh: boolean; report_age_ms: number }[] }[] };
async function hostOf(node: MeshNode, model: string, host: string) {
  const fleet = await getJson<Fleet>(`${node.url}/v1/fleet/capacity`);
  return fleet.models.find((m) => m.name === model)?.hosts.find((h) => h.node === host);
}

describe('capacity polling at scale: the first request for a model nobody asked this node for', () => {
  const nodes: MeshNode[] = [];
  let gw: MeshNode;
  before(async () => {
    // capacity_poll 250ms (the helper's), stale_after 3s (the default), background far beyond the test.
    const mesh = { capacity_background: `${BACKGROUND_MS}ms`, capacity_interest: '10m' };
    gw = await startMeshNode({ name: 'gw', ip: IP(1), mesh, routing: { queue_timeout: '60s' } });
    const steady = await startMeshNode({ name: 'steady', ip: IP(2), seeds: [gw.gossip], mesh, models: [{ name: 'steady-model', engine: 'sim', parallel: 2, sim }] });
    const late = await startMeshNode({ name: 'late', ip: IP(3), seeds: [gw.gossip], mesh, models: [{ name: 'late-model', engine: 'sim', parallel: 2, sim }] });
    nodes.push(gw, steady, late);
    await waitConverged(nodes);
    // The gateway polls a member that has just joined at once: it knows both models.
    await waitFor(async () => (await hostOf(gw, 'late-model', 'late')) && (await hostOf(gw, 'steady-model', 'steady')), { timeoutMs: 15_000, what: 'reports of both members' });
  });
  after(() => stopAll(nodes));

  it('polls a member it routes to every capacity_poll, and lets the report of one it does not go stale', async () => {
    const r = await post(`${gw.url}/v1/chat/completions`, chat('steady-model'));
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers['x-viiwork-node'], 'steady');
    // Nobody asked the gateway for late-model: its report ages past stale_after (with every member polled every
    // 250 ms, it never would).
    const stale = await waitFor(async () => {
      const h = await hostOf(gw, 'late-model', 'late');
      return h && !h.fresh ? h : undefined;
    }, { timeoutMs: 20_000, what: "late's report stale on the gateway" });
    assert.ok(stale.report_age_ms > 3000, `age ${stale.report_age_ms}`);
    // Meanwhile the member it routes to stays fresh.
    const steady = await hostOf(gw, 'steady-model', 'steady');
    assert.ok(steady?.fresh, `steady: ${JSON.stringify(steady)}`);
    assert.ok(steady.report_age_ms < 3000, `steady age ${steady.report_age_ms}`);
    // /v1/models still lists the model of the member polled slowly (SPEC section 7: fresh or stale).
    const models = await getJson<{ data: { id: string }[] }>(`${gw.url}/v1/models`);
    assert.ok(models.data.some((m) => m.id === 'late-model'));
  });

  it('routes the first request for late-model to its host after one poll, not a background interval', async () => {
    const h = await hostOf(gw, 'late-model', 'late');
    assert.ok(h && !h.fresh, 'precondition: the report is stale');
    const started = performance.now();
    const r = await post(`${gw.url}/v1/chat/completions`, chat('late-model'));
    const took = performance.now() - started;
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers['x-viiwork-node'], 'late');
    // It waited in the queue for the poll the request caused (one round trip), far from the background interval.
    assert.equal(r.headers['x-viiwork-route'], 'queued');
    const queued = Number(r.headers['x-viiwork-queued-ms']);
    assert.ok(queued < 5000 && took < 10_000, `queued ${queued} ms, took ${Math.round(took)} ms (background ${BACKGROUND_MS} ms)`);
  });

  it('from then on polls that host every capacity_poll: the next request is routed at once', async () => {
    // Still fresh once more than stale_after has passed since the request: polled again meanwhile (every
    // capacity_poll), not once.
    const since = performance.now();
    const later = await waitFor(
      async () => {
        const h = await hostOf(gw, 'late-model', 'late');
        return h?.fresh && performance.now() - since > 3500 ? h : undefined;
      },
      { timeoutMs: 15_000, what: 'late still fresh after stale_after' },
    );
    assert.ok(later.report_age_ms < 3000);
    const r = await post(`${gw.url}/v1/chat/completions`, chat('late-model'));
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers['x-viiwork-node'], 'late');
    assert.notEqual(r.headers['x-viiwork-route'], 'queued');
  });
});
