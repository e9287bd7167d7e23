/**
 * Issue 42, item 4, over a real mesh: an entry node that runs no engine
 * predicts the cached tokens of the slot its executor takes, when the
 * executor, from the gaps between turns its own slots have seen, takes an
 * idle conversation for dead that the entry, having seen no gaps, would take
 * for live. The executor publishes those gaps (`turn_gaps` in its report) and
 * the entry prices its slots by them (SPEC 9.6, "Slot choice").
 *
 * The case of the flaky pricing test: a second conversation sharing a live
 * one's long system prompt. The executor keeps the live conversation's slot
 * and takes the dead one's (starting cold); an entry reading every idle slot
 * as live priced the live conversation's slot instead ("predicted 4013, the
 * engine reused 3").
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { waitFor } from '../fakes/wait.ts';
import { getJson, postJson as post, startGatewayAndSimHost, stopAll, type MeshNode } from '../helpers/mesh.ts';

const IP = (n: number) => `127.0.233.${n}`;
const sim = { ttft_ms: 5, prefill_ms_per_1k: 40, tokens_per_s: 2000, output_tokens: 2 };

type SlotState = { tokens: number; busy: boolean; idle_ms?: number | null };
type Fleet = { models: { name: string; hosts: { node: string; report_age_ms: number; targets?: { slot_state?: SlotState[] }[] }[] }[] };
type Usage = { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number } };

describe("an entry without engines prices a host's slots by the host's own gaps between turns", () => {
  const nodes: MeshNode[] = [];
  let gw: MeshNode;
  let h: MeshNode;
  before(async () => {
    [gw, h] = await startGatewayAndSimHost(nodes, IP, sim);
  });
  after(() => stopAll(nodes));

  /** h's slots of m as h itself tells them. */
  const slotsOnH = async () => (await getJson<Fleet>(`${h.url}/v1/fleet/capacity`)).models.find((m) => m.name === 'm')?.hosts.find((x) => x.node === 'h')?.targets?.[0]?.slot_state ?? [];
  /** The longest gap between turns h has seen, as it publishes it, and how many. */
  const gapsOfH = async () => {
    const r = await getJson<{ turn_gaps?: { n: number; q: number[] } }>(`${h.url}/v1/capacity`);
    assert.ok(r.turn_gaps, 'h publishes its gaps between turns');
    return { n: r.turn_gaps.n, longest: r.turn_gaps.q.at(-1) ?? 0 };
  };

  it("predicts the cached tokens the engine reuses for a conversation sharing a live one's system prompt, where the host takes another, dead conversation's slot", async () => {
    // A conversation whose turns come back quickly to h, but for one that waits over a second: h learns that a
    // conversation idle past about twice that is not coming back.
    const gapper: { role: string; content: string }[] = [{ role: 'system', content: `You keep quick turns. ${'g'.repeat(2000)}` }];
    for (let turn = 0; turn < 10; turn++) {
      if (turn === 9) {
        // The other slot takes a conversation of its own (the gapper's is live): once both are dead, the live one of a
        // round below takes one of them and the other still holds a conversation, dead to h.
        const filler = await post(`${h.url}/v1/chat/completions`, { model: 'm', max_tokens: 2, messages: [{ role: 'system', content: `You fill a slot. ${'f'.repeat(2000)}` }, { role: 'user', content: 'once' }] });
        assert.equal(filler.status, 200, filler.text);
        await waitFor(async () => (await slotsOnH()).some((s) => !s.busy && (s.idle_ms ?? 0) >= 1500), { timeoutMs: 20_000, what: 'a gap of over a second on h' });
      }
      gapper.push({ role: 'user', content: `quick turn ${turn}` });
      const r = await post(`${h.url}/v1/chat/completions`, { model: 'm', max_tokens: 2, messages: gapper });
      assert.equal(r.status, 200, r.text);
      gapper.push({ role: 'assistant', content: JSON.parse(r.text).choices[0].message.content });
    }
    await waitFor(async () => (await gapsOfH()).n >= 8, { timeoutMs: 20_000, what: 'eight gaps seen on h' });

    // A round: every slot's conversation dead to h, then a live conversation and a second one sharing its system
    // prompt, both through gw. Should the live one have died too before gw heard of it (a very slow machine), h takes
    // its slot for the second and the round proves nothing: another round, with other prompts.
    for (let round = 0; round < 4; round++) {
      const { longest } = await gapsOfH();
      await waitFor(async () => (await slotsOnH()).every((s) => !s.busy && s.tokens > 0 && (s.idle_ms ?? 0) > 2 * longest + 200), {
        timeoutMs: 30_000,
        what: `every conversation on h idle past twice its longest gap (${longest} ms)`,
      });
      const system = { role: 'system', content: `You are the shared agent of round ${round}. ${'z'.repeat(16_000)}` }; // about 4,000 tokens
      const first = await post(`${gw.url}/v1/chat/completions`, { model: 'm', max_tokens: 2, messages: [system, { role: 'user', content: 'first' }] });
      assert.equal(first.status, 200, first.text);
      const ended = Date.now();
      await waitFor(
        async () => {
          const m = (await getJson<Fleet>(`${gw.url}/v1/fleet/capacity`)).models.find((x) => x.name === 'm');
          return !!m && m.hosts.every((x) => x.report_age_ms < Date.now() - ended);
        },
        { timeoutMs: 10_000, what: 'a report of h polled after the first conversation ended, at gw' },
      );
      const seen = (await getJson<{ last: number }>(`${gw.url}/v1/decisions`)).last;
      const second = await post(`${gw.url}/v1/chat/completions`, { model: 'm', max_tokens: 2, messages: [system, { role: 'user', content: 'second' }] });
      assert.equal(second.status, 200, second.text);
      const usage = JSON.parse(second.text).usage as Usage;
      const cached = usage.prompt_tokens_details?.cached_tokens ?? 0;
      const feed = await getJson<{ data: { entry: string; route: string; predicted_cached?: number | null }[] }>(`${gw.url}/v1/decisions?since=${seen}`);
      const row = feed.data.find((d) => d.entry === 'gw' && d.route !== 'forwarded');
      assert.ok(row, JSON.stringify(feed.data));
      assert.ok(Math.abs((row.predicted_cached ?? 0) - cached) <= 0.1 * usage.prompt_tokens, `round ${round}: predicted ${row.predicted_cached}, the engine reused ${cached} of ${usage.prompt_tokens}`);
      if (cached < 0.1 * usage.prompt_tokens) return;
    }
    assert.fail('in no round was the first conversation still live to h when the second came');
  });
});
