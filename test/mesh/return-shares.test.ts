/**
 * Issue 42, item 2 (session 32): on a host whose single shots seldom come
 * back, a long conversation's slot is kept over a single shot's, though the
 * single shot's prompt is larger and was idle as long. The host counts its
 * placements' turns, publishes the share of conversations that came back by
 * turns (`turn_gaps.r`) and each slot's turns in its digest; an entry without
 * engines prices with both. Before, every idle conversation under a minute
 * was taken for one that returns, and the larger single shot's slot was kept.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { decodeSlots } from '../../src/capacity/digest.ts';
import { waitFor } from '../fakes/wait.ts';
import { getJson, postJson as post, startGatewayAndSimHost, stopAll, type MeshNode } from '../helpers/mesh.ts';

const IP = (n: number) => `127.0.241.${n}`;
const sim = { ttft_ms: 2, prefill_ms_per_1k: 5, tokens_per_s: 5000, output_tokens: 2 };

type Usage = { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number } };
type Capacity = { turn_gaps?: { n: number; q: number[]; r?: number[] }; models: { name: string; targets?: { digest?: { slots?: unknown } }[] }[] };
type Message = { role: string; content: string };

describe('a long conversation keeps its slot over a single shot that would not come back', () => {
  const nodes: MeshNode[] = [];
  let gw: MeshNode;
  let h: MeshNode;
  before(async () => {
    [gw, h] = await startGatewayAndSimHost(nodes, IP, sim);
  });
  after(() => stopAll(nodes));

  const chat = async (url: string, messages: Message[]) => {
    const r = await post(`${url}/v1/chat/completions`, { model: 'm', max_tokens: 2, messages });
    assert.equal(r.status, 200, r.text);
    const body = JSON.parse(r.text) as { usage: Usage; choices: { message: { content: string } }[] };
    return { usage: body.usage, reply: body.choices[0].message.content };
  };
  /** A single shot of about 6,000 tokens, its own system prompt. */
  const single = (name: string): Message[] => [{ role: 'system', content: `You answer ${name} once. ${'s'.repeat(24_000)}` }, { role: 'user', content: name }];

  it("a new single shot takes the other single shot's slot, and the conversation's next turn finds its prompt", async () => {
    // Thirty single shots: h learns that a conversation with one turn seldom comes back.
    for (let i = 0; i < 30; i++) await chat(h.url, single(`shot ${i}`));
    const caps = async () => getJson<Capacity>(`${h.url}/v1/capacity`);

    // A conversation of about 4,000 tokens, six turns in its slot.
    const convo: Message[] = [{ role: 'system', content: `You keep a long conversation. ${'c'.repeat(16_000)}` }];
    for (let turn = 1; turn <= 6; turn++) {
      convo.push({ role: 'user', content: `turn ${turn}` });
      convo.push({ role: 'assistant', content: (await chat(h.url, convo)).reply });
    }
    const convoEnded = Date.now();
    const shares = (await caps()).turn_gaps?.r;
    assert.ok(shares && shares[0] < 0.5, `h publishes a low share of returns after one turn: ${JSON.stringify(shares)}`);
    // h's digest says each slot's turns: the conversation's six, the last single shot's one.
    const slotTurns = async () => {
      const m = (await caps()).models.find((x) => x.name === 'm');
      return (decodeSlots(m?.targets?.[0]?.digest?.slots, 0) ?? []).map((s) => s.turns);
    };
    await waitFor(async () => [...(await slotTurns())].sort().join() === '1,6', { timeoutMs: 10_000, what: "h's digest showing slots of 1 and 6 turns" });

    // The entry hears of it before the next single shot enters there.
    await waitFor(
      async () => {
        const fleet = await getJson<{ models: { name: string; hosts: { node: string; report_age_ms: number }[] }[] }>(`${gw.url}/v1/fleet/capacity`);
        const started = Date.now() - convoEnded;
        return fleet.models.find((x) => x.name === 'm')?.hosts.some((x) => x.node === 'h' && x.report_age_ms < started) ?? false;
      },
      { timeoutMs: 10_000, what: "a report of h at gw polled after the conversation's sixth turn" },
    );
    await chat(gw.url, single('the next shot'));

    convo.push({ role: 'user', content: 'turn 7' });
    const seventh = await chat(gw.url, convo);
    const cached = seventh.usage.prompt_tokens_details?.cached_tokens ?? 0;
    assert.ok(cached >= 0.9 * seventh.usage.prompt_tokens - 40, `the seventh turn reused ${cached} of ${seventh.usage.prompt_tokens} tokens`);
  });
});
