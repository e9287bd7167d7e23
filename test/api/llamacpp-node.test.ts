/** A node supervising llama-server processes (the fake one): crash, restart, queued requests served after it, dead after repeated crashes. */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { request } from 'undici';
import { FAKE_LLAMA_SERVER } from '../fakes/fake-engine.ts';
import { waitFor } from '../fakes/wait.ts';
import { startNode, tempDir } from '../helpers/node.ts';

const chat = (url: string) =>
  request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'llama', messages: [{ role: 'user', content: 'hi' }] }),
  }).then(async (r) => ({ status: r.statusCode, body: await r.body.text() }));

describe('llamacpp engine under the node', () => {
  it('restarts a crashed llama-server and serves the queued requests after the restart', async () => {
    const t = await startNode({
      routing: { queue_timeout: '60s' },
      models: [{ name: 'llama', engine: 'llamacpp', path: '/models/fake.gguf', parallel: 1, llamacpp: { binary: FAKE_LLAMA_SERVER, args: [] } }],
    });
    try {
      const backend = t.node.backends[0];
      await waitFor(() => backend.state === 'healthy', { timeoutMs: 20_000, what: 'llama-server healthy' });
      await request(`${backend.url}/_control/hold`, { method: 'POST' }).then((r) => r.body.text());
      const first = chat(t.url);
      await waitFor(async () => ((await (await request(`${backend.url}/_control/state`)).body.json()) as { held?: number }).held === 1, {
        what: 'first request held by the engine',
      });
      const queued = [chat(t.url), chat(t.url)];
      await waitFor(() => t.node.queues.depth('llama') === 2, { what: 'two requests queued' });
      const oldUrl = backend.url;
      await request(`${oldUrl}/_control/crash`, { method: 'POST' }).catch(() => undefined);
      assert.equal((await first).status, 502);
      await waitFor(() => backend.state === 'healthy' && backend.url !== oldUrl, { timeoutMs: 20_000, what: 'restarted and healthy' });
      const results = await Promise.all(queued);
      assert.deepEqual(results.map((r) => r.status), [200, 200]);
      assert.ok(t.logs.some((l) => /\[llama\/0\]/.test(l)), 'engine output is logged with the [model/idx] prefix');
    } finally {
      await t.stop();
    }
  });

  it('marks a llama-server that keeps crashing dead, with a log line that says so', async () => {
    const dir = tempDir();
    const crashFile = path.join(dir, 'crash');
    fs.writeFileSync(crashFile, 'always');
    process.env.FAKE_CRASH_FILE = crashFile;
    process.env.FAKE_CRASH_WHEN = 'loaded';
    const t = await startNode({ models: [{ name: 'llama', engine: 'llamacpp', path: '/models/fake.gguf', parallel: 1, llamacpp: { binary: FAKE_LLAMA_SERVER, args: [] } }] });
    try {
      await waitFor(() => t.node.backends[0].state === 'dead', { timeoutMs: 40_000, what: 'backend dead' });
      assert.ok(t.logs.some((l) => /llama\/0 is dead/.test(l)), t.logs.join(''));
      const r = await chat(t.url);
      assert.equal(r.status, 503);
      const h = await request(`${t.url}/health`);
      assert.equal(h.statusCode, 200);
      await h.body.text();
    } finally {
      delete process.env.FAKE_CRASH_FILE;
      delete process.env.FAKE_CRASH_WHEN;
      await t.stop();
    }
  });
});
