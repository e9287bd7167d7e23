/**
 * Issue 18, item 6: the Messages API translated for the real llama-server
 * (llama.cpp build 4748, CPU) running the project's tiny GGUF, streamed and
 * not, through the Anthropic SDK; count_tokens counted by that server's own
 * /tokenize. Skips with a message when the engine is absent (`npm run engine`
 * builds it, or VIIWORK_LLAMA_SERVER names one; test/helpers/engine.ts).
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import { request } from 'undici';
import { countText, messagesToChat } from '../../src/messages/index.ts';
import { waitFor } from '../fakes/wait.ts';
import { writeTinyGguf } from '../fakes/tiny-gguf.ts';
import { startNode, tempDir, type TestNode } from '../helpers/node.ts';
import { realLlamaServer } from '../helpers/engine.ts';

/** Greedy sampling, so the tiny model's output is the same every run (this SDK's types have no `temperature`; the API and our translation take it). */
const GREEDY = { temperature: 0 } as {};

const { binary: BINARY, skip: absent } = realLlamaServer();

describe('the Messages API on the real llama-server (tiny GGUF)', { skip: absent }, () => {
  let t: TestNode;
  let client: Anthropic;
  before(async () => {
    const model = writeTinyGguf(path.join(tempDir('viiwork-tiny-'), 'tiny.gguf'));
    t = await startNode({ node: { name: 'llama-msg' }, models: [{ name: 'tiny', engine: 'llamacpp', path: model, parallel: 1, context: 256, llamacpp: { binary: BINARY, args: [] } }] });
    await waitFor(() => t.node.backends[0].state === 'healthy', { timeoutMs: 60_000, what: 'llama-server healthy' });
    client = new Anthropic({ baseURL: t.url, apiKey: 'none', maxRetries: 0, timeout: 120_000 });
  });
  after(() => t?.stop());

  it('messages.create: the translated chat completion comes back as a message', async () => {
    const m = await client.messages.create({ model: 'tiny', max_tokens: 4, ...GREEDY, system: 'You are tiny.', messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(m.type, 'message');
    assert.equal(m.content[0].type, 'text');
    // Four tokens were asked for and, sampled greedily (temperature 0), the tiny model never stops before that.
    assert.equal(m.stop_reason, 'max_tokens');
    assert.equal(m.usage.output_tokens, 4);
    assert.ok(m.usage.input_tokens + m.usage.cache_read_input_tokens! > 5);
  });

  it('messages.stream: the event sequence completes with usage', async () => {
    const stream = client.messages.stream({ model: 'tiny', max_tokens: 3, ...GREEDY, messages: [{ role: 'user', content: 'stream' }] });
    const kinds: string[] = [];
    stream.on('streamEvent', (ev) => kinds.push(ev.type));
    const final = await stream.finalMessage();
    assert.equal(kinds[0], 'message_start');
    assert.ok(kinds.includes('content_block_stop'));
    assert.equal(kinds.at(-1), 'message_stop');
    assert.equal(final.stop_reason, 'max_tokens');
    assert.equal(final.usage.output_tokens, 3);
  });

  it("count_tokens is llama-server's own /tokenize count of the request's text", async () => {
    const body = { model: 'tiny', system: 'count me', messages: [{ role: 'user' as const, content: 'one two three four' }] };
    // The count comes from a backend the node holds healthy (else, by design, the estimate): on a loaded machine a
    // health check of the engine can fail for a moment after the streams above.
    await waitFor(() => t.node.backends[0].state === 'healthy', { timeoutMs: 30_000, what: 'llama-server healthy' });
    const r = await client.messages.countTokens(body);
    const chat = messagesToChat(body);
    assert.ok(chat.ok);
    const direct = await request(`${t.node.backends[0].url}/tokenize`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ content: countText(chat.chat) }) });
    const tokens = ((await direct.body.json()) as { tokens: number[] }).tokens;
    assert.equal(r.input_tokens, tokens.length);
    // The tiny vocab is mostly single characters: its count is far from the bytes ÷ 4 estimate.
    assert.ok(r.input_tokens > Buffer.byteLength(countText(chat.chat)) / 2, String(r.input_tokens));
  });
});
