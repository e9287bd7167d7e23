/**
 * Issue 25, item 6, against the real llama-server (build 4748, CPU, the tiny
 * GGUF our own code writes): a conversation that echoes each generated
 * reply, and the node's prediction is the engine's count within 10%. The
 * tiny model's generated tokens do not come back from their text (its byte
 * vocabulary tokenizes the echo otherwise), so this engine reuses the prompt
 * and the reply's first token only: the node records the reply, sees the
 * engine reuse little of it, and credits replies on that backend less
 * (cache-model.ts ReplyCredit), where the sim engine (test/api/
 * reply-prediction.test.ts) reuses all of it.
 *
 * Runs against the engine test/helpers/engine.ts finds (VIIWORK_LLAMA_SERVER,
 * else `npm run engine`'s build); skips otherwise, fails under CI.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { writeTinyGguf } from '../fakes/tiny-gguf.ts';
import { waitFor } from '../fakes/wait.ts';
import { startNode, tempDir, type TestNode } from '../helpers/node.ts';
import { realLlamaServer } from '../helpers/engine.ts';

const { binary: BINARY, skip } = realLlamaServer();

describe('the reply in the record, against the real llama-server', { skip }, () => {
  let t: TestNode;
  let seen = 0;
  before(async () => {
    const dir = tempDir('viiwork-llama-reply-');
    const model = writeTinyGguf(path.join(dir, 'tiny.gguf'), { contextLength: 2048 });
    t = await startNode({
      api: { host: '127.0.121.3' },
      models: [{ name: 'tiny', engine: 'llamacpp', path: model, parallel: 2, context: 2048, llamacpp: { binary: BINARY, args: ['--threads', '1'] } }],
    });
    await waitFor(() => t.node.backends[0].state === 'healthy', { timeoutMs: 60_000, what: 'llama-server healthy' });
  });
  after(() => t?.stop());

  async function ask(messages: unknown[], stream: boolean) {
    // The tiny model's bytes are noise: a grammar keeps them to letters, so the client's echo is the very tokens generated.
    const body = { model: 'tiny', messages, max_tokens: 24, temperature: 0, grammar: 'root ::= [a-z ]+', ...(stream ? { stream: true } : {}) };
    const r = await request(`${t.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const text = await r.body.text();
    assert.equal(r.statusCode, 200, text);
    const reply = stream
      ? text
          .split('\n')
          .filter((l) => l.startsWith('data: {'))
          .map((l) => JSON.parse(l.slice(6)).choices?.[0]?.delta?.content ?? '')
          .join('')
      : (JSON.parse(text).choices[0].message.content as string);
    const feed = (await (await request(`${t.url}/v1/decisions?since=${seen}`)).body.json()) as { last: number; data: { predicted_cached: number | null; cached_tokens: number | null }[] };
    seen = feed.last;
    const d = feed.data.at(-1)!;
    const usage = stream ? undefined : JSON.parse(text).usage;
    return { reply, predicted: d.predicted_cached ?? 0, reported: d.cached_tokens ?? 0, prompt: usage?.prompt_tokens, completion: usage?.completion_tokens };
  }

  for (const stream of [false, true]) {
    it(`each next turn is predicted as the engine reuses it, reply and all (${stream ? 'streamed' : 'whole answers'})`, async (ctx) => {
      const messages: { role: string; content: string }[] = [{ role: 'system', content: `You keep notes ${stream ? 'in a stream' : 'whole'}. `.repeat(4) }];
      let before = 0;
      for (let turn = 1; turn <= 4; turn++) {
        messages.push({ role: 'user', content: `note ${turn}: write down what comes next in the plan` });
        const a = await ask(messages, stream);
        ctx.diagnostic(`turn ${turn}: predicted ${a.predicted}, reported ${a.reported}, reply of ${a.reply.length} characters ${JSON.stringify(a.reply)}, prompt ${a.prompt}, completion ${a.completion}`);
        if (turn > 1) {
          assert.ok(a.reported > before, `turn ${turn}: the conversation was reused (${a.reported}; the previous turn's ${before})`);
          assert.ok(Math.abs(a.predicted - a.reported) <= 0.1 * a.reported, `turn ${turn}: predicted ${a.predicted}, reported ${a.reported}`);
        }
        messages.push({ role: 'assistant', content: a.reply });
        before = a.reported;
      }
    });
  }
});
