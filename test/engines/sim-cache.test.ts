import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { request } from 'undici';
import type { SimSettings } from '../../src/config/schema.ts';
import {
  CHARS_PER_TOKEN,
  chooseSlot,
  commonPrefixChars,
  commonPrefixTokens,
  renderPrompt,
  SlotPool,
  tokenCount,
  type SlotState,
} from '../../src/engines/prompt-cache.ts';
import { SIM_SLOT_HEADER, SimBackend } from '../../src/engines/sim.ts';

type Msg = { role: string; content: string };
type Usage = { prompt_tokens: number; completion_tokens: number; prompt_tokens_details: { cached_tokens: number } };
type Timings = { cache_n: number; prompt_n: number; prompt_ms: number };
type Whole = { choices: { message?: { content: string }; text?: string }[]; usage: Usage; timings: Timings; id_slot: number };

const FAST: SimSettings = { ttft_ms: 1, prefill_ms_per_1k: 10, tokens_per_s: 5000, output_tokens: 4 };

async function startSim(parallel: number, sim: SimSettings = FAST): Promise<SimBackend> {
  const info = { id: `sim-cache/${parallel}`, model: 'sim-cache', index: 0, parallel, context: 8192, engine: 'sim' as const };
  const b = new SimBackend(info, { workloads: ['chat', 'completion'], audio: false }, sim, () => {});
  await b.start();
  return b;
}

async function post(url: string, body: unknown): Promise<{ status: number; slot: number; text: string }> {
  const res = await request(url, { method: 'POST', body: JSON.stringify(body), headers: { 'content-type': 'application/json' } });
  const text = await res.body.text();
  return { status: res.statusCode, slot: Number(res.headers[SIM_SLOT_HEADER]), text };
}

async function chat(b: SimBackend, messages: Msg[], extra: Record<string, unknown> = {}): Promise<Whole & { slot: number }> {
  const r = await post(`${b.url}/v1/chat/completions`, { model: 'sim-cache', messages, ...extra });
  assert.equal(r.status, 200, r.text);
  const doc = JSON.parse(r.text) as Whole;
  assert.equal(doc.id_slot, r.slot, 'the body and the header name the same slot');
  return { ...doc, slot: r.slot };
}

/** What the engine should reuse for `next` from a slot that answered `prev` with `answer`. */
function expectedCached(prev: Msg[], answer: string, next: Msg[]): number {
  const held = renderPrompt(true, { messages: prev })! + answer;
  const prompt = renderPrompt(true, { messages: next })!;
  return Math.min(commonPrefixTokens(held, prompt), tokenCount(prompt) - 1);
}

const SYSTEM_A = 'You are a careful assistant for the accounting team. Answer in short sentences. '.repeat(8);
const SYSTEM_B = 'Tu es un assistant pour les jardiniers; réponds avec des exemples concrets. '.repeat(8);

describe('the sim engine takes id_slot as llama-server does (issue 25)', () => {
  let b: SimBackend;
  before(async () => {
    b = await startSim(2);
  });
  after(() => b.stop());

  test('a request naming a slot runs there, whatever the engine’s own rule would pick, and reuses what that slot holds', async () => {
    const a = [{ role: 'system', content: SYSTEM_A }, { role: 'user', content: 'first' }];
    const first = await chat(b, a, { id_slot: 1 });
    assert.equal(first.slot, 1);
    // The engine's own rule would take slot 1 again (it shares the system prompt); the node says slot 0: cold there.
    const other = await chat(b, [{ role: 'system', content: SYSTEM_A }, { role: 'user', content: 'second' }], { id_slot: 0 });
    assert.equal(other.slot, 0);
    assert.equal(other.usage.prompt_tokens_details.cached_tokens, 0);
    const next = [...a, { role: 'assistant', content: first.choices[0].message!.content }, { role: 'user', content: 'more' }];
    const again = await chat(b, next, { id_slot: 1 });
    assert.equal(again.slot, 1);
    assert.equal(again.usage.prompt_tokens_details.cached_tokens, expectedCached(a, first.choices[0].message!.content, next));
  });
});

describe('sim engine prompt cache over HTTP', () => {
  let one: SimBackend;
  let two: SimBackend;
  before(async () => {
    one = await startSim(1);
    two = await startSim(2);
  });
  after(async () => {
    await one.stop();
    await two.stop();
  });

  test('a second turn of a conversation reports its common prefix with the first as cached tokens', async () => {
    const turn1: Msg[] = [
      { role: 'system', content: SYSTEM_A },
      { role: 'user', content: 'What is a ledger?' },
    ];
    const a1 = await chat(one, turn1);
    assert.equal(a1.usage.prompt_tokens_details.cached_tokens, 0);
    assert.equal(a1.usage.prompt_tokens, tokenCount(renderPrompt(true, { messages: turn1 })!));
    const answer = a1.choices[0].message!.content;
    assert.match(answer, /^\[simulated\]/, 'answers stay labelled as simulated');

    const turn2: Msg[] = [...turn1, { role: 'assistant', content: answer }, { role: 'user', content: 'And a journal?' }];
    const a2 = await chat(one, turn2);
    const cached = a2.usage.prompt_tokens_details.cached_tokens;
    assert.equal(cached, expectedCached(turn1, answer, turn2));
    // The whole first turn, its answer included, is reused.
    assert.ok(cached >= Math.floor((renderPrompt(true, { messages: turn1 })!.length + answer.length) / CHARS_PER_TOKEN));
    assert.ok(cached < a2.usage.prompt_tokens);
    // Prefill covers only the tokens past the cached prefix, as llama-server's timings report them.
    assert.equal(a2.timings.cache_n, cached);
    assert.equal(a2.timings.prompt_n, a2.usage.prompt_tokens - cached);
    assert.equal(a2.timings.prompt_ms, FAST.ttft_ms + (FAST.prefill_ms_per_1k * a2.timings.prompt_n) / 1000);
    assert.ok(a2.timings.prompt_ms < FAST.ttft_ms + (FAST.prefill_ms_per_1k * a2.usage.prompt_tokens) / 1000);
  });

  test('a different system prompt reuses next to nothing from the slot', async () => {
    await chat(one, [
      { role: 'system', content: SYSTEM_A },
      { role: 'user', content: 'Summarise the quarter.' },
    ]);
    const other = await chat(one, [
      { role: 'system', content: SYSTEM_B },
      { role: 'user', content: 'Summarise the quarter.' },
    ]);
    // Only the shared role marker of the template can match.
    assert.ok(other.usage.prompt_tokens_details.cached_tokens <= Math.ceil('<|system|>\n'.length / CHARS_PER_TOKEN));
    assert.ok(other.usage.prompt_tokens_details.cached_tokens < other.usage.prompt_tokens / 50);
  });

  test('the same prompt again reuses all but its last token', async () => {
    const m: Msg[] = [{ role: 'user', content: 'Repeat after me: the same words twice.' }];
    await chat(one, m);
    const again = await chat(one, m);
    assert.equal(again.usage.prompt_tokens_details.cached_tokens, again.usage.prompt_tokens - 1);
    assert.equal(again.timings.prompt_n, 1);
  });

  test('cache_prompt: false reuses nothing', async () => {
    const m: Msg[] = [{ role: 'user', content: 'No cache for this one, please, even though it repeats.' }];
    await chat(one, m);
    const cold = await chat(one, m, { cache_prompt: false });
    assert.equal(cold.usage.prompt_tokens_details.cached_tokens, 0);
    assert.equal(cold.timings.prompt_n, cold.usage.prompt_tokens);
  });

  test('with two slots, two interleaved conversations each keep hitting their own warm slot', async () => {
    const convs: Msg[][] = [
      [
        { role: 'system', content: SYSTEM_A },
        { role: 'user', content: 'First question of A.' },
      ],
      [
        { role: 'system', content: SYSTEM_B },
        { role: 'user', content: 'Première question de B.' },
      ],
    ];
    const slots: number[][] = [[], []];
    for (let turn = 0; turn < 4; turn++) {
      for (const c of [0, 1]) {
        const before = convs[c];
        const r = await chat(two, before);
        slots[c].push(r.slot);
        const cached = r.usage.prompt_tokens_details.cached_tokens;
        if (turn === 0) assert.ok(cached < r.usage.prompt_tokens / 50, `a new conversation finds no warm slot (${cached})`);
        else assert.ok(cached > r.usage.prompt_tokens / 2, `turn ${turn} of ${c} is warm (${cached} of ${r.usage.prompt_tokens})`);
        convs[c] = [...before, { role: 'assistant', content: r.choices[0].message!.content }, { role: 'user', content: `Turn ${turn + 2} of ${c}.` }];
      }
    }
    assert.ok(slots[0].every((s) => s === slots[0][0]), `A stays on one slot: ${slots[0]}`);
    assert.ok(slots[1].every((s) => s === slots[1][0]), `B stays on one slot: ${slots[1]}`);
    assert.notEqual(slots[0][0], slots[1][0]);

    // Sent at the same moment, each still lands on its own slot.
    const [ra, rb] = await Promise.all([chat(two, convs[0]), chat(two, convs[1])]);
    assert.equal(ra.slot, slots[0][0]);
    assert.equal(rb.slot, slots[1][0]);
    assert.ok(ra.usage.prompt_tokens_details.cached_tokens > 0 && rb.usage.prompt_tokens_details.cached_tokens > 0);

    const res = await request(`${two.url}/slots`);
    const view = (await res.body.json()) as { id: number; is_processing: boolean; cached_tokens: number }[];
    assert.equal(view.length, 2);
    assert.ok(view.every((s) => !s.is_processing && s.cached_tokens > 0));
  });

  test('streamed usage carries cached_tokens, and the stream names its slot', async () => {
    const turn1: Msg[] = [
      { role: 'system', content: SYSTEM_B },
      { role: 'user', content: 'Stream me something.' },
    ];
    const a1 = await chat(one, turn1);
    const answer = a1.choices[0].message!.content;
    const turn2: Msg[] = [...turn1, { role: 'assistant', content: answer }, { role: 'user', content: 'Again, streamed.' }];
    const r = await post(`${one.url}/v1/chat/completions`, { model: 'sim-cache', messages: turn2, stream: true, stream_options: { include_usage: true } });
    assert.equal(r.status, 200);
    assert.equal(r.slot, 0);
    const events = r.text
      .split('\n\n')
      .filter((e) => e.startsWith('data: '))
      .map((e) => e.slice(6));
    assert.equal(events.at(-1), '[DONE]');
    const last = JSON.parse(events.at(-2)!) as { choices: unknown[]; usage: Usage; timings: Timings; id_slot: number };
    assert.deepEqual(last.choices, []);
    assert.equal(last.usage.prompt_tokens_details.cached_tokens, expectedCached(turn1, answer, turn2));
    assert.ok(last.usage.prompt_tokens_details.cached_tokens > 0);
    assert.equal(last.timings.prompt_n, last.usage.prompt_tokens - last.usage.prompt_tokens_details.cached_tokens);
    assert.equal(last.id_slot, 0);
  });

  test('completions cache their prompt prefix too', async () => {
    const base = 'Once upon a time, in a land of shared prefixes, '.repeat(10);
    const r1 = JSON.parse((await post(`${one.url}/v1/completions`, { model: 'sim-cache', prompt: base })).text) as Whole;
    const r2 = JSON.parse((await post(`${one.url}/v1/completions`, { model: 'sim-cache', prompt: base + r1.choices[0].text + ' the end' })).text) as Whole;
    assert.equal(r2.usage.prompt_tokens_details.cached_tokens, Math.floor((base + r1.choices[0].text!).length / CHARS_PER_TOKEN));
  });

  test('a 1 MB prompt is handled fast and its follow-up reuses it', async () => {
    const sim = await startSim(4, { ttft_ms: 1, prefill_ms_per_1k: 0, tokens_per_s: 5000, output_tokens: 2 });
    try {
      const big = 'lorem ipsum dolor sit amet, '.repeat(Math.ceil((1 << 20) / 28)).slice(0, 1 << 20);
      const t0 = performance.now();
      const first = await chat(sim, [{ role: 'user', content: big }]);
      const second = await chat(sim, [
        { role: 'user', content: big },
        { role: 'assistant', content: first.choices[0].message!.content },
        { role: 'user', content: 'and one more line' },
      ]);
      const elapsed = performance.now() - t0;
      assert.ok(first.usage.prompt_tokens >= (1 << 20) / CHARS_PER_TOKEN);
      assert.ok(second.usage.prompt_tokens_details.cached_tokens >= (1 << 20) / CHARS_PER_TOKEN);
      assert.equal(second.slot, first.slot);
      // Generous bound for a loaded machine; the work itself is a few milliseconds (see the unit test below).
      assert.ok(elapsed < 5000, `two 1 MB requests took ${elapsed.toFixed(0)} ms`);
    } finally {
      await sim.stop();
    }
  });
});

describe('prompt cache slot choice (pure)', () => {
  const slot = (id: number, text: string, lastUsed: number, busy = false): SlotState => ({ id, text, lastUsed, busy });

  test('the free slot with the longest common prefix wins when it covers more than half the prompt', () => {
    const prompt = 'abcdefgh'.repeat(10) + 'tail';
    const slots = [slot(0, 'abcdefgh'.repeat(6), 1), slot(1, 'abcdefgh'.repeat(9), 2), slot(2, '', 0)];
    assert.deepEqual(chooseSlot(slots, prompt), { slot: 1, cachedTokens: 18 });
  });

  test('a busy slot is never chosen, however warm', () => {
    const prompt = 'abcdefgh'.repeat(10);
    const slots = [slot(0, prompt, 1, true), slot(1, 'abcdefgh'.repeat(8), 2)];
    assert.equal(chooseSlot(slots, prompt)?.slot, 1);
    assert.equal(chooseSlot([slot(0, prompt, 1, true)], prompt), undefined);
  });

  test('a short shared prefix does not steal a warm slot: the least recently used free slot is taken', () => {
    const prompt = '<|system|>\nsomething else entirely, long enough to matter';
    const slots = [slot(0, '<|system|>\nthe other conversation', 1), slot(1, '', 0)];
    assert.deepEqual(chooseSlot(slots, prompt), { slot: 1, cachedTokens: 0 });
    // Of two used slots, the older one; it still reuses what little it shares.
    const used = [slot(0, '<|system|>\nA', 5), slot(1, '<|system|>\nB', 3)];
    assert.deepEqual(chooseSlot(used, prompt), { slot: 1, cachedTokens: 2 });
  });

  test('cache off picks the same slot and reuses nothing', () => {
    const prompt = 'abcdefgh'.repeat(10);
    assert.deepEqual(chooseSlot([slot(0, '', 0), slot(1, prompt, 1)], prompt, { cache: false }), { slot: 1, cachedTokens: 0 });
  });

  test('chat renders roles and contents in order, text parts included; completions use the prompt', () => {
    const r = renderPrompt(true, {
      messages: [
        { role: 'system', content: 'S' },
        { role: 'user', content: [{ type: 'text', text: 'U' }] },
      ],
    });
    assert.equal(r, '<|system|>\nS\n<|user|>\nU\n<|assistant|>\n');
    assert.equal(renderPrompt(false, { prompt: 'P' }), 'P');
    assert.equal(renderPrompt(true, {}), undefined);
    assert.equal(renderPrompt(false, {}), undefined);
  });

  test('a busy pool queues in arrival order, then the abandoned prefill keeps only the reused prefix', async () => {
    const pool = new SlotPool(1);
    const warm = 'w'.repeat(400);
    const l1 = (await pool.acquire(warm))!;
    assert.equal(l1.cachedTokens, 0);
    const order: string[] = [];
    const p2 = pool.acquire(warm + 'x'.repeat(40)).then((l) => (order.push('second'), l));
    const aborted = new AbortController();
    const p3 = pool.acquire('other', aborted.signal);
    const p4 = pool.acquire(warm + 'y').then((l) => (order.push('fourth'), l));
    assert.equal(pool.queued, 3);
    aborted.abort();
    assert.equal(await p3, undefined);
    l1.finish(true, '');
    const l2 = (await p2)!;
    assert.equal(l2.cachedTokens, 100);
    l2.finish(false); // abandoned during prefill: keeps the 100 tokens it reused, not its tail
    const l4 = (await p4)!;
    assert.deepEqual(order, ['second', 'fourth']);
    assert.equal(l4.cachedTokens, 100);
    l4.finish(true, 'generated');
    assert.equal(pool.slots[0].text, warm + 'y' + 'generated');
    assert.equal(pool.queued, 0);
  });

  test('common prefix of 1 MB texts costs little', () => {
    const a = 'lorem ipsum dolor sit amet, '.repeat(40000).slice(0, 1 << 20);
    const b = a.slice(0, 900_001) + 'X' + a.slice(900_002);
    const t0 = performance.now();
    const slots = [0, 1, 2, 3].map((id) => slot(id, a, id + 1));
    const choice = chooseSlot(slots, b);
    const ms = performance.now() - t0;
    assert.equal(commonPrefixChars(a, b), 900_001);
    assert.deepEqual(choice, { slot: 0, cachedTokens: Math.floor(900_001 / CHARS_PER_TOKEN) });
    assert.ok(ms < 1000, `${ms.toFixed(1)} ms`);
  });
});

describe('the sim engine with sim.cache_ram keeps today’s llama-server’s RAM pool (issue 41, item 5)', () => {
  const conv = (system: string, user: string): Msg[] => [{ role: 'system', content: system }, { role: 'user', content: user }];

  for (const pool of [0, 100_000]) {
    test(pool ? 'one slot, another conversation in between: the first comes back from RAM' : 'one slot without a pool: the first conversation’s next turn runs cold', async () => {
      const b = await startSim(1, { ...FAST, cache_ram: pool });
      try {
        const a = conv(SYSTEM_A, 'first question');
        const first = await chat(b, a, { id_slot: 0 });
        await chat(b, conv(SYSTEM_B, 'another conversation'), { id_slot: 0 });
        const next = [...a, { role: 'assistant', content: first.choices[0].message!.content }, { role: 'user', content: 'more' }];
        const again = await chat(b, next, { id_slot: 0 });
        const warm = expectedCached(a, first.choices[0].message!.content, next);
        // Without a pool only the template's opening (`<|system|>`) is shared with the conversation in between.
        if (pool) assert.equal(again.usage.prompt_tokens_details.cached_tokens, warm);
        else assert.ok(again.usage.prompt_tokens_details.cached_tokens < warm / 10, `cached ${again.usage.prompt_tokens_details.cached_tokens}`);
      } finally {
        await b.stop();
      }
    });
  }

  test('the pool drops the oldest saved prompt first when it is full (a pool of tokens)', () => {
    const pool = new SlotPool(1, { ram: 3 * tokenCount('x'.repeat(400)) });
    const prompts = ['a', 'b', 'c', 'd'].map((c) => c.repeat(400));
    const run = async (p: string) => (await pool.acquire(p, undefined, true, 0))!;
    return (async () => {
      for (const p of prompts) (await run(p)).finish(true);
      // The slot holds d; RAM holds a, b and c, full.
      assert.deepEqual(pool.ram!.entries.map((e) => e.prompt[0]), ['a', 'b', 'c']);
      // b's next turn saves d, which drops a (the oldest saved), then restores b.
      const back = await run(`${prompts[1]}more`);
      assert.equal(back.cachedTokens, tokenCount(prompts[1]), 'b comes back from RAM');
      assert.deepEqual(pool.ram!.entries.map((e) => e.prompt[0]), ['c', 'd']);
      back.finish(true);
      const lost = await run(`${prompts[0]}more`);
      assert.ok(lost.cachedTokens === 0, 'a was dropped: cold');
      lost.finish(true);
    })();
  });
});
