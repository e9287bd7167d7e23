/**
 * Issue 41, item 2 and its first target: today's llama-server keeps a
 * host-RAM prompt cache (`--cache-ram`, on by default), so a conversation
 * pushed out of its slot comes back from RAM instead of being prefilled.
 * Three times more conversations than slots, interleaved turn by turn, on one
 * slot and on two, with the engine's default pool and with `cache_ram: 0`:
 * the node's predicted cached tokens (its decision feed) against the engine's
 * own count stay within 10% of the prompt on average.
 *
 * Runs against the engine test/helpers/engine.ts finds (VIIWORK_LLAMA_SERVER,
 * else the build of `npm run engine`).
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { writeTinyGguf } from '../fakes/tiny-gguf.ts';
import { waitFor } from '../fakes/wait.ts';
import { startNode, tempDir, type TestNode } from '../helpers/node.ts';
import { realLlamaServer } from '../helpers/engine.ts';

const { binary: BINARY, skip } = realLlamaServer();

/** Deterministic lowercase text (a conversation's own words: nothing shared with the others past the template). */
function words(seed: number, chars: number): string {
  let x = seed * 2654435761 + 1;
  let out = '';
  while (out.length < chars) {
    x = (Math.imul(x ^ (x >>> 15), 2246822519) + 0x9e3779b9) >>> 0;
    out += String.fromCharCode(97 + (x % 26));
    if (x % 7 === 0) out += ' ';
  }
  return out.slice(0, chars);
}

interface Msg {
  role: string;
  content: string;
}

interface Sample {
  label: string;
  prompt: number;
  engine: number;
  predicted: number;
  restored: number;
}

async function ask(t: TestNode, messages: Msg[], seen: { seq: number }): Promise<{ reply: string; prompt: number; engine: number; predicted: number; restored: number }> {
  const body = { model: 'tiny', messages, max_tokens: 8, temperature: 0 };
  const r = await request(`${t.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await r.body.text();
  assert.equal(r.statusCode, 200, text);
  const doc = JSON.parse(text) as { choices: { message: { content: string } }[]; usage: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number } } };
  const feed = (await (await request(`${t.url}/v1/decisions?since=${seen.seq}`)).body.json()) as {
    last: number;
    data: { predicted_cached: number | null; cached_tokens: number | null; restored_tokens?: number }[];
  };
  seen.seq = feed.last;
  const d = feed.data.at(-1)!;
  const engine = doc.usage.prompt_tokens_details?.cached_tokens;
  assert.equal(typeof engine, 'number', 'today’s llama-server reports cached_tokens');
  assert.equal(d.cached_tokens, engine, 'the feed has the engine’s count');
  return { reply: doc.choices[0].message.content ?? '', prompt: doc.usage.prompt_tokens, engine: engine!, predicted: d.predicted_cached ?? 0, restored: d.restored_tokens ?? 0 };
}

/**
 * `n` conversations, `turns` turns each, interleaved (A1 B1 C1 A2 B2 …): a
 * 300-character first message, 100 more characters a turn, the whole
 * history (replies included) sent every time, as clients do.
 */
async function interleave(t: TestNode, n: number, turns: number, system?: string): Promise<Sample[]> {
  const seen = { seq: 0 };
  const convs: Msg[][] = Array.from({ length: n }, () => (system ? [{ role: 'system', content: system }] : []));
  const out: Sample[] = [];
  for (let turn = 1; turn <= turns; turn++) {
    for (let c = 0; c < n; c++) {
      const msgs = convs[c];
      msgs.push({ role: 'user', content: words(100 * c + turn, turn === 1 ? 300 : 100) });
      const a = await ask(t, msgs, seen);
      msgs.push({ role: 'assistant', content: a.reply });
      out.push({ label: `${String.fromCharCode(65 + c)}${turn}`, prompt: a.prompt, engine: a.engine, predicted: a.predicted, restored: a.restored });
    }
  }
  return out;
}

/** Mean over requests of |predicted − engine| ÷ prompt tokens. */
function meanError(samples: readonly Sample[]): number {
  return samples.reduce((s, x) => s + Math.abs(x.predicted - x.engine) / x.prompt, 0) / samples.length;
}

interface Case {
  slots: number;
  cacheRam?: number;
  host: string;
  /** A system prompt every conversation shares (a slot taken then keeps half or more of its prompt: not saved to RAM). */
  system?: string;
  /** Extra llama-server flags. */
  args?: string[];
}

const SHARED = words(999, 1000);
const CASES: Case[] = [
  { slots: 1, host: '127.0.122.1' },
  { slots: 2, host: '127.0.122.2' },
  { slots: 1, cacheRam: 0, host: '127.0.122.3' },
  { slots: 2, cacheRam: 0, host: '127.0.122.4' },
];
/** The engine's other behaviours, the error target alone: a shared long system prompt, and idle slots copied to RAM. */
const MORE: Case[] = [
  { slots: 1, host: '127.0.122.5', system: SHARED },
  { slots: 2, host: '127.0.122.6', system: SHARED, args: ['--cache-idle-slots'] },
];

for (const c of [...CASES, ...MORE]) {
  const pool = `${c.cacheRam === undefined ? 'the engine’s default RAM pool' : `cache_ram: ${c.cacheRam}`}${c.system ? ', a shared system prompt' : ''}${c.args ? `, ${c.args.join(' ')}` : ''}`;
  describe(`predicted cached tokens against today’s llama-server, ${c.slots} slot${c.slots > 1 ? 's' : ''}, ${pool}`, { skip }, () => {
    let t: TestNode;
    before(async () => {
      const dir = tempDir('viiwork-llama-ram-');
      const model = writeTinyGguf(path.join(dir, 'tiny.gguf'), { contextLength: 2048 });
      t = await startNode({
        api: { host: c.host },
        models: [
          {
            name: 'tiny',
            engine: 'llamacpp',
            path: model,
            parallel: c.slots,
            context: 2048,
            ...(c.cacheRam !== undefined ? { cache_ram: c.cacheRam } : {}),
            llamacpp: { binary: BINARY, args: ['--threads', '1', ...(c.args ?? [])] },
          },
        ],
      });
      await waitFor(() => t.node.backends[0].state === 'healthy', { timeoutMs: 60_000, what: 'llama-server healthy' });
    });
    after(() => t?.stop());

    it(`${3 * c.slots} conversations interleaved: the mean error is at most 10% of the prompt`, async (ctx) => {
      const samples = await interleave(t, 3 * c.slots, 3, c.system);
      for (const s of samples) ctx.diagnostic(`${s.label}: prompt ${s.prompt}, engine ${s.engine}, predicted ${s.predicted}${s.restored ? ` (${s.restored} from RAM)` : ''}`);
      const err = meanError(samples);
      ctx.diagnostic(`mean |predicted − engine| ÷ prompt = ${(100 * err).toFixed(1)}%`);
      assert.ok(err <= 0.1, `mean error ${(100 * err).toFixed(1)}% of the prompt`);
      const later = samples.filter((s) => !s.label.endsWith('1'));
      if (c.system) return;
      if (c.cacheRam === undefined) {
        // Each later turn finds its conversation in RAM: the engine reuses most of the prompt, and the feed says so.
        for (const s of later) assert.ok(s.engine > 0.5 * s.prompt, `${s.label}: the engine reused ${s.engine} of ${s.prompt}`);
        assert.ok(later.every((s) => s.restored > 0), 'every later turn is told restored from RAM in the feed');
      } else {
        // No pool: three conversations per slot push each other out, and every later turn runs cold.
        for (const s of later) assert.ok(s.engine < 0.1 * s.prompt, `${s.label}: the engine reused ${s.engine} of ${s.prompt}`);
        assert.ok(samples.every((s) => s.restored === 0), 'nothing is told restored without a pool');
      }
    });
  });
}
