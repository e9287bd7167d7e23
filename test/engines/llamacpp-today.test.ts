/**
 * Today's llama-server (the one `npm run engine` builds from node-llama-cpp's
 * squashed llama.cpp source) through the node, where it differs from b4748:
 * its build_info says "b1-…", which is no evidence of age, so a listed
 * workload the version gate covers stays listed; its context overflow is a
 * 400 the client gets with the engine's own words, and the backend stays
 * healthy. Skips without the engine (fails under CI).
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startNode, tempDir, type TestNode } from '../helpers/node.ts';
import { realLlamaServer } from '../helpers/engine.ts';
import { waitFor } from '../fakes/wait.ts';
import { writeTinyGguf } from '../fakes/tiny-gguf.ts';
import { parseBuildInfo } from '../../src/engines/llamacpp/version.ts';

const { binary: BINARY, skip } = realLlamaServer();

describe("today's llama-server through the node", { skip }, () => {
  let t: TestNode;
  before(async () => {
    const model = writeTinyGguf(path.join(tempDir('vw-today-'), 'tiny.gguf'));
    t = await startNode({
      api: { host: '127.0.187.41' },
      models: [{ name: 'tiny', engine: 'llamacpp', path: model, parallel: 1, context: 256, workloads: ['chat', 'completion', 'rerank'], llamacpp: { binary: BINARY, args: ['-t', '1'] } }],
    });
    await waitFor(() => t.node.backends[0].state === 'healthy', { timeoutMs: 60_000, what: 'llama-server healthy' });
  });
  after(() => t?.stop());

  it('a build number that says nothing (b1, b0) withdraws nothing, and the log says the workload was not version-checked', async (ctx) => {
    const info = t.node.backends[0].buildInfo;
    ctx.diagnostic(`build_info ${info}`);
    const cap = (await (await fetch(`${t.url}/v1/capacity`)).json()) as { models: { targets: { workloads: string[] }[] }[] };
    assert.deepEqual(cap.models[0].targets[0].workloads, ['chat', 'completion', 'rerank']);
    if (parseBuildInfo(info)?.build === undefined) {
      // The engine `npm run engine` builds: a squashed source, "b1-de3ff81".
      assert.ok(t.logs.some((l) => /rerank kept without a version check/.test(l)), t.logs.filter((l) => !l.includes('[tiny/0]')).join(''));
    }
  });

  it('a prompt longer than the context: 400 with the engine\'s words, then the backend serves the next request', async () => {
    const long = await fetch(`${t.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tiny', max_tokens: 4, messages: [{ role: 'user', content: 'abcdefgh '.repeat(300) }] }),
    });
    const body = (await long.json()) as { error: { message: string } };
    assert.equal(long.status, 400, JSON.stringify(body));
    assert.match(body.error.message, /context/i);
    assert.equal(t.node.backends[0].state, 'healthy', 'a client error is not an engine failure');
    const ok = await fetch(`${t.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tiny', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] }),
    });
    assert.equal(ok.status, 200, await ok.text());
  });
});
