/**
 * Issue 17 over a real mesh (SPEC section 9, step 6): with measured scores
 * on every host, a conversation's turns entering through three different
 * nodes stay on one host while it has room (with a session key or without:
 * the other entries read the host's cache digest), and a second conversation
 * that shares a long system prompt with a live one is priced as the
 * executor will serve it (issue 25: the live conversation's slot is kept).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { waitFor } from '../fakes/wait.ts';
import { getJson, postJson as post, startMeshNode, stopAll, waitConverged, waitModelOn, type MeshNode } from '../helpers/mesh.ts';
import { rendezvousRank } from '../../src/hashing/rendezvous.ts';

const IP = (n: number) => `127.0.130.${n}`;
/** Prefill dominates: 40 ms per 1k tokens on top of a 5 ms overhead. */
const sim = { ttft_ms: 5, prefill_ms_per_1k: 40, tokens_per_s: 2000, output_tokens: 2 };
const HOSTS = ['p1', 'p2', 'p3'];

type Fleet = { models: { name: string; hosts: { node: string; fresh: boolean; ttft_overhead_ms?: number; prefill_ms_per_1k?: number }[] }[] };

let nth = 0;
/** A prompt no cache holds (it starts with a fresh number). */
const coldChat = (chars: number) => ({ model: 'm', max_tokens: 2, messages: [{ role: 'user', content: `${++nth} cold ${'w'.repeat(chars)}` }] });

describe('pricing by uncached prefill across a mesh', () => {
  const nodes: MeshNode[] = [];
  let gw: MeshNode;
  before(async () => {
    gw = await startMeshNode({ name: 'gw', ip: IP(1), mesh: { capacity_background: '10s' } });
    nodes.push(gw);
    for (const [k, name] of HOSTS.entries()) {
      nodes.push(await startMeshNode({ name, ip: IP(2 + k), seeds: [gw.gossip], mesh: { capacity_background: '10s' }, models: [{ name: 'm', engine: 'sim', parallel: 2, sim }] }));
    }
    await waitConverged(nodes);
    // The gateway serves nothing and was asked for nothing yet: it polls the hosts only in the background (10 s,
    // SPEC section 7), so their reports may be stale; its first request for `m` polls them at once.
    await waitFor(
      async () => {
        const m = (await getJson<Fleet>(`${gw.url}/v1/fleet/capacity`)).models.find((x) => x.name === 'm');
        return !!m && HOSTS.every((h) => m.hosts.some((x) => x.node === h));
      },
      { timeoutMs: 15_000, what: 'the hosts of m known to gw' },
    );
    assert.equal((await post(`${gw.url}/v1/chat/completions`, coldChat(10))).status, 200);
    await waitModelOn(gw, 'm', HOSTS);
    // Scores on every host: short prompts give the overhead, long ones the rate per 1k.
    for (const h of HOSTS) {
      for (let i = 0; i < 3; i++) {
        assert.equal((await post(`${gw.url}/v1/chat/completions?host=${h}`, coldChat(100))).status, 200);
        assert.equal((await post(`${gw.url}/v1/chat/completions?host=${h}`, coldChat(8000))).status, 200);
      }
    }
    for (const n of nodes) {
      await waitFor(
        async () => {
          const f = await getJson<Fleet>(`${n.url}/v1/fleet/capacity`);
          const m = f.models.find((x) => x.name === 'm');
          return !!m && HOSTS.every((h) => m.hosts.some((x) => x.node === h && x.fresh && x.ttft_overhead_ms !== undefined && x.prefill_ms_per_1k !== undefined));
        },
        { timeoutMs: 20_000, what: `scores of every host seen from ${n.name}` },
      );
    }
  });
  after(() => stopAll(nodes));

  it("keeps a conversation's turns on one host, entering through each of three nodes in turn", async (t) => {
    // Another entry node learns what a host holds from that host's cache digest in /v1/capacity (issue 17, part A).
    const report = await getJson<{ models: { targets?: Record<string, unknown>[] }[] }>(`${nodes[1].url}/v1/capacity`);
    if (!report.models.some((m) => (m.targets ?? []).some((tg) => Object.keys(tg).some((k) => k.includes('digest'))))) {
      t.skip('the capacity reports carry no cache digests yet (issue 17, part A): an entry node knows only its own routes');
      return;
    }
    const entries = nodes.slice(1);
    // With a session key and without one: the host holding the conversation is priced lowest from every entry.
    for (const [conv, header] of [['alpha', true], ['beta', true], ['gamma', false], ['delta', false]] as const) {
      const messages: { role: string; content: string }[] = [{ role: 'system', content: `You help with ${conv}. ${'s'.repeat(4000)}` }];
      const ran: string[] = [];
      for (let turn = 0; turn < 6; turn++) {
        messages.push({ role: 'user', content: `turn ${turn} of ${conv}: ${'u'.repeat(600)}` });
        const entry = entries[turn % entries.length];
        const r = await post(`${entry.url}/v1/chat/completions`, { model: 'm', max_tokens: 2, messages }, header ? { 'x-session-id': `conv-${conv}` } : {});
        assert.equal(r.status, 200, r.text);
        const ended = Date.now();
        ran.push(String(r.headers['x-viiwork-node']));
        messages.push({ role: 'assistant', content: JSON.parse(r.text).choices[0].message.content });
        // An agent thinks between turns: the next entry node has heard from every host since this turn ended.
        const next = entries[(turn + 1) % entries.length];
        await waitFor(
          async () => {
            const m = (await getJson<{ models: { name: string; hosts: { node: string; report_age_ms: number }[] }[] }>(`${next.url}/v1/fleet/capacity`)).models.find((x) => x.name === 'm');
            return !!m && m.hosts.every((h) => h.report_age_ms < Date.now() - ended);
          },
          { timeoutMs: 10_000, what: `reports polled after turn ${turn} seen from ${next.name}` },
        );
      }
      assert.equal(new Set(ran).size, 1, `${conv}${header ? '' : ' (no session header)'} ran on ${ran.join(', ')}`);
    }
  });

  it("prices a second conversation sharing a system prompt as the executor will serve it: the live conversation's slot is not taken", async () => {
    const system = { role: 'system', content: `You are the shared agent. ${'z'.repeat(16_000)}` }; // about 4,000 tokens: 160 ms of prefill
    // The first conversation goes where its session ranking says (every host is cold for it).
    const first = await post(`${gw.url}/v1/chat/completions`, { model: 'm', max_tokens: 2, messages: [system, { role: 'user', content: 'first' }] }, { 'x-session-id': 'shared-1' });
    assert.equal(first.status, 200, first.text);
    const home = String(first.headers['x-viiwork-node']);
    // A second conversation whose own session ranking puts another host first.
    const key = Array.from({ length: 50 }, (_, i) => `shared-other-${i}`).find((k) => rendezvousRank(k, HOSTS)[0] !== home)!;
    const seen = (await getJson<{ last: number }>(`${gw.url}/v1/decisions`)).last;
    const second = await post(`${gw.url}/v1/chat/completions`, { model: 'm', max_tokens: 2, messages: [system, { role: 'user', content: 'second' }] }, { 'x-session-id': key });
    assert.equal(second.status, 200, second.text);
    // Issue 17 sent it to the host holding the system prompt. Since issue 25 the executor keeps a live conversation's
    // slot while an empty one exists (SPEC 9.6, "Slot choice"; docs/decisions.md), so the second conversation starts
    // cold there too, and an entry prices each host by the slot its executor will choose: the system prompt held in
    // another conversation's slot is worth nothing to it, and what the entry predicts is what the engine reuses.
    const usage = JSON.parse(second.text).usage as { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number } };
    assert.ok(usage.prompt_tokens >= 3900, JSON.stringify(usage));
    const feed = await getJson<{ data: { entry: string; executor: string | null; route: string; timeline?: string; predicted_cached?: number | null; cached_tokens?: number | null }[] }>(`${gw.url}/v1/decisions?since=${seen}`);
    const row = feed.data.find((d) => d.entry === 'gw' && d.route !== 'forwarded');
    assert.ok(row, JSON.stringify(feed.data));
    const cached = usage.prompt_tokens_details?.cached_tokens ?? 0;
    if (Math.abs((row.predicted_cached ?? 0) - cached) > 0.1 * usage.prompt_tokens) {
      // What the executor chose, and what the entry saw: the rows and the entry's timeline say where the two parted.
      const executor = nodes.find((n) => n.name === row.executor);
      const rows = executor ? (await getJson<{ data: unknown[] }>(`${executor.url}/v1/decisions`)).data.slice(-3) : [];
      const timeline = row.timeline ? await getJson<unknown>(`${gw.url}/v1/timeline/${encodeURIComponent(String(row.timeline))}`).catch((e) => String(e)) : undefined;
      assert.fail(`predicted ${row.predicted_cached}, the engine reused ${cached} of ${usage.prompt_tokens}; first on ${home}; the entry's row: ${JSON.stringify(row)}; the executor's last rows: ${JSON.stringify(rows)}; the entry's timeline: ${JSON.stringify(timeline)}`);
    }
  });
});
