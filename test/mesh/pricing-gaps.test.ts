/**
 * Issue 42, item 4 (SPEC section 9, step 6, "Slot choice": the entry node
 * predicts the executor's choice from the digest, so its price and the
 * choice agree). Whether an idle conversation is still live is judged from
 * the gaps between turns: the executor's own, which its slot choice uses.
 * An entry that judged the executor's slots by the gaps it observed itself
 * (none, at a node without engines: every conversation idle under a minute
 * live) predicted that a new conversation sharing a system prompt would take
 * the slot of the live conversation holding it, while the executor, whose
 * gaps say another slot's conversation is long over, took that one: the
 * flaky "predicted 4013, the engine reused 3 of 4017" of
 * test/mesh/pricing.test.ts, made certain here.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { waitFor } from '../fakes/wait.ts';
import { getJson, postJson as post, startMeshNode, stopAll, waitConverged, waitModelOn, type MeshNode } from '../helpers/mesh.ts';

const IP = (n: number) => `127.0.233.${n}`;
const sim = { ttft_ms: 5, prefill_ms_per_1k: 40, tokens_per_s: 2000, output_tokens: 2 };
/** The executor learns how long its conversations pause from this many turns' gaps (route/slots.ts MIN_GAPS is 8). */
const TURNS = 10;
/** Each of those pauses lasts at least this long (measured by the executor's own report, not slept). */
const PAUSE_MS = 800;

type Report = { models: { name: string; targets?: { digest?: { slots?: [string, number, number, number, ...unknown[]][] } }[] }[] };
type Fleet = { models: { name: string; hosts: { node: string; report_age_ms: number }[] }[] };

/** The idle ms of the host's slots that hold a prompt (busy ones: -1), from its own report. */
async function idleOfHeld(n: MeshNode): Promise<number[]> {
  const r = await getJson<Report>(`${n.url}/v1/capacity`);
  const slots = r.models.find((m) => m.name === 'm')?.targets?.flatMap((t) => t.digest?.slots ?? []) ?? [];
  return slots.filter((s) => s[0] !== '').map((s) => s[3]);
}

describe("an entry prices a member's slots by the member's own turn gaps", () => {
  let gw: MeshNode;
  let host: MeshNode;
  before(async () => {
    gw = await startMeshNode({ name: 'gw', ip: IP(1) });
    host = await startMeshNode({ name: 'h1', ip: IP(2), seeds: [gw.gossip], models: [{ name: 'm', engine: 'sim', parallel: 2, sim }] });
    await waitConverged([gw, host]);
    await waitModelOn(gw, 'm', ['h1']);
  });
  after(() => stopAll([gw, host]));

  it("predicts the slot the executor takes when the executor's gaps say an idle conversation is over and the entry's own would not", async () => {
    // A conversation on the host, entered there (the gateway sees none of it), pausing at least PAUSE_MS between turns.
    const x: { role: string; content: string }[] = [{ role: 'system', content: `You help with the x-files. ${'x'.repeat(800)}` }];
    let longest = 0;
    let sent = 0;
    for (let turn = 0; turn < TURNS; turn++) {
      if (turn > 0) await waitFor(async () => (await idleOfHeld(host)).some((ms) => ms >= PAUSE_MS), { timeoutMs: 10_000, what: `a pause of ${PAUSE_MS} ms after turn ${turn - 1}` });
      x.push({ role: 'user', content: `turn ${turn}: ${'u'.repeat(400)}` });
      const at = Date.now();
      const r = await post(`${host.url}/v1/chat/completions`, { model: 'm', max_tokens: 2, messages: x });
      assert.equal(r.status, 200, r.text);
      // The executor's gap before this turn ended after the last turn was sent and began before this one's answer came.
      if (turn > 0) longest = Math.max(longest, Date.now() - sent);
      sent = at;
      x.push({ role: 'assistant', content: JSON.parse(r.text).choices[0].message.content });
    }
    // A one-shot right after it takes the other slot. Then both are over by the executor's gaps: idle more than twice
    // the longest it has seen (and well under the minute an entry without gaps of its own gives any idle conversation).
    const once = await post(`${host.url}/v1/chat/completions`, { model: 'm', max_tokens: 2, messages: [{ role: 'user', content: `a one-shot question ${'q'.repeat(1200)}` }] });
    assert.equal(once.status, 200, once.text);
    await waitFor(async () => (await idleOfHeld(host)).every((ms) => ms > 2 * longest), { timeoutMs: 30_000, what: `both conversations idle past ${2 * longest} ms` });

    // A conversation with a long system prompt takes the slot idle longest; its reply has just ended when the next one
    // comes, so it is live, while the one-shot in the other slot is over.
    const system = { role: 'system', content: `You are the shared agent. ${'z'.repeat(16_000)}` };
    const first = await post(`${gw.url}/v1/chat/completions`, { model: 'm', max_tokens: 2, messages: [system, { role: 'user', content: 'first' }] });
    assert.equal(first.status, 200, first.text);
    const ended = Date.now();
    await waitFor(
      async () => (await getJson<Fleet>(`${gw.url}/v1/fleet/capacity`)).models.find((m) => m.name === 'm')?.hosts.every((h) => h.report_age_ms < Date.now() - ended),
      { timeoutMs: 10_000, what: 'a report of the host polled after the first conversation ended' },
    );
    const seen = (await getJson<{ last: number }>(`${gw.url}/v1/decisions`)).last;
    const second = await post(`${gw.url}/v1/chat/completions`, { model: 'm', max_tokens: 2, messages: [system, { role: 'user', content: 'second' }] });
    assert.equal(second.status, 200, second.text);
    const usage = JSON.parse(second.text).usage as { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number } };
    const cached = usage.prompt_tokens_details?.cached_tokens ?? 0;
    // The executor keeps the live conversation's slot and takes the one-shot's: the shared system prompt is not
    // reused, and the gateway said so before it sent the request.
    assert.ok(cached < 0.1 * usage.prompt_tokens, `the engine reused ${cached} of ${usage.prompt_tokens}: the live conversation's slot was taken`);
    const feed = await getJson<{ data: { entry: string; executor: string | null; predicted_cached?: number | null }[] }>(`${gw.url}/v1/decisions?since=${seen}`);
    const row = feed.data.find((d) => d.entry === 'gw' && d.executor === 'h1');
    assert.ok(row, JSON.stringify(feed.data));
    assert.ok(Math.abs((row.predicted_cached ?? 0) - cached) <= 0.1 * usage.prompt_tokens, `predicted ${row.predicted_cached}, the engine reused ${cached} of ${usage.prompt_tokens}`);
  });
});
