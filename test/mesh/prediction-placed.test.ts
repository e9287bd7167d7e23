/**
 * Issue 42, item 4, the disagreement left after turn_gaps: an entry prices a
 * member's slots from the member's digest, which is a poll old. A
 * conversation the entry has just sent there is in one of those slots now,
 * the one the entry's price named; the digest still shows that slot as it
 * was. A second conversation sharing the first's system prompt, sent before
 * the next poll, was priced cold (the digest's empty slot) while the
 * executor, keeping the other slot's live conversation, took the first
 * one's slot and reused the system prompt: "predicted 0, the engine reused
 * 4011". The entry now puts what its own forwards left in the slots they
 * took (dispatch/entry/placed-slots.ts).
 *
 * The entry polls every 4 s here (reports stay fresh for 20 s), so both
 * conversations are priced on one report polled before the first was sent.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { waitFor } from '../fakes/wait.ts';
import { getJson, postJson as post, startMeshNode, stopAll, waitConverged, waitModelOn, type MeshNode } from '../helpers/mesh.ts';

const IP = (n: number) => `127.0.235.${n}`;
const sim = { ttft_ms: 5, prefill_ms_per_1k: 40, tokens_per_s: 2000, output_tokens: 2 };
const SLOW_POLL = { capacity_poll: '4s', capacity_background: '4s' };
const FRESH_LONG = { stale_after: '20s' };

type Fleet = { models: { name: string; hosts: { node: string; report_age_ms: number; targets?: { slot_state?: { tokens: number; busy: boolean }[] }[] }[] }[] };
type Usage = { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number } };

describe("an entry prices a member's slots with what its own forwards left in them since the poll", () => {
  const nodes: MeshNode[] = [];
  let gw: MeshNode;
  let h: MeshNode;
  before(async () => {
    gw = await startMeshNode({ name: 'gw', ip: IP(1), mesh: SLOW_POLL, routing: FRESH_LONG });
    h = await startMeshNode({ name: 'h', ip: IP(2), seeds: [gw.gossip], mesh: SLOW_POLL, routing: FRESH_LONG, models: [{ name: 'm', engine: 'sim', parallel: 2, sim }] });
    nodes.push(gw, h);
    await waitConverged(nodes);
    await waitModelOn(gw, 'm', ['h'], 30_000);
  });
  after(() => stopAll(nodes));

  const hostAtGw = async () => (await getJson<Fleet>(`${gw.url}/v1/fleet/capacity`)).models.find((m) => m.name === 'm')?.hosts.find((x) => x.node === 'h');

  it('predicts the cached tokens the engine reuses for a second conversation sent before the next poll', async () => {
    // A live conversation in one slot of h (entered at h: gw knows it only from h's report), the other slot empty.
    const live = await post(`${h.url}/v1/chat/completions`, { model: 'm', max_tokens: 2, messages: [{ role: 'system', content: `Another agent altogether. ${'a'.repeat(4000)}` }, { role: 'user', content: 'still going' }] });
    assert.equal(live.status, 200, live.text);
    const ended = Date.now();
    // gw's report of h shows it, and was polled just now: the next poll is seconds away.
    await waitFor(
      async () => {
        const x = await hostAtGw();
        const age = x?.report_age_ms ?? Infinity;
        return age < Date.now() - ended && age < 1000 && (x?.targets?.[0]?.slot_state ?? []).some((s) => s.tokens > 0);
      },
      { timeoutMs: 20_000, intervalMs: 20, what: 'a report of h polled after the live conversation, at gw' },
    );
    const system = { role: 'system', content: `You are the shared agent. ${'z'.repeat(16_000)}` }; // about 4,000 tokens
    const first = await post(`${gw.url}/v1/chat/completions`, { model: 'm', max_tokens: 2, messages: [system, { role: 'user', content: 'first' }] });
    assert.equal(first.status, 200, first.text);
    assert.equal(first.headers['x-viiwork-slot'], undefined, "the slot h says it took is for gw's record, not the client");
    const seen = (await getJson<{ last: number }>(`${gw.url}/v1/decisions`)).last;
    const second = await post(`${gw.url}/v1/chat/completions`, { model: 'm', max_tokens: 2, messages: [system, { role: 'user', content: 'second' }] });
    assert.equal(second.status, 200, second.text);
    const usage = JSON.parse(second.text).usage as Usage;
    const cached = usage.prompt_tokens_details?.cached_tokens ?? 0;
    // h keeps the live conversation's slot and takes the first one's: the shared system prompt is reused.
    assert.ok(cached > 0.9 * usage.prompt_tokens, `the engine reused ${cached} of ${usage.prompt_tokens}`);
    const feed = await getJson<{ data: { entry: string; executor: string | null; predicted_cached?: number | null }[] }>(`${gw.url}/v1/decisions?since=${seen}`);
    const row = feed.data.find((d) => d.entry === 'gw' && d.executor === 'h');
    assert.ok(row, JSON.stringify(feed.data));
    assert.ok(Math.abs((row.predicted_cached ?? 0) - cached) <= 0.1 * usage.prompt_tokens, `predicted ${row.predicted_cached}, the engine reused ${cached} of ${usage.prompt_tokens}`);
  });
});
