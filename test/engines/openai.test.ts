import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { BackendInfo } from '../../src/engines/backend.ts';
import { OpenAIBackend } from '../../src/engines/openai.ts';
import { startFakeEngine } from '../fakes/fake-engine.ts';
import { waitFor } from '../fakes/wait.ts';

const info: BackendInfo = { id: 'emb/0', model: 'emb', index: 0, parallel: 4, context: 8192, engine: 'openai' };
const descriptor = { workloads: ['embeddings'], audio: false };

function logger() {
  const lines: string[] = [];
  return { lines, log: (msg: string) => void lines.push(msg) };
}

describe('OpenAIBackend', () => {
  test('is healthy against a running server after start()', async () => {
    const e = await startFakeEngine();
    const { log } = logger();
    const b = new OpenAIBackend(info, descriptor, { url: `${e.url}/v1/` }, log, { healthIntervalMs: 50 });
    try {
      await b.start();
      assert.equal(b.state, 'healthy');
      assert.equal(b.url, e.url);
      assert.equal(b.healthPath, '/health');
      assert.equal(b.buildInfo, 'b4500-abcdef');
      assert.equal(b.buildNumber, 4500);
    } finally {
      await b.stop();
      await e.close();
    }
    assert.equal(b.state, 'stopped');
  });

  test('turns unhealthy when the server goes away and healthy again when it is back, logging each change once', async () => {
    let e = await startFakeEngine();
    const port = e.port;
    const { lines, log } = logger();
    const b = new OpenAIBackend(info, descriptor, { url: e.url }, log, { healthIntervalMs: 40 });
    const states: string[] = [];
    b.on('state', (s: string) => states.push(s));
    try {
      await b.start();
      assert.equal(b.state, 'healthy');
      await e.close();
      await waitFor(() => b.state === 'unhealthy', { what: 'unhealthy' });
      assert.match(b.reason, /connection refused/);
      // More failed probes must not log again.
      const linesBefore = lines.length;
      for (let i = 0; i < 3; i++) await b.check();
      assert.equal(lines.length, linesBefore);
      e = await startFakeEngine({ port });
      await waitFor(() => b.state === 'healthy', { what: 'healthy again' });
      assert.equal(lines.filter((l) => l.includes('→ unhealthy')).length, 1);
      assert.equal(lines.filter((l) => l.includes('unhealthy → healthy')).length, 1);
      assert.deepEqual(
        states.filter((s, i) => s !== states[i - 1]),
        ['healthy', 'unhealthy', 'healthy'],
      );
    } finally {
      await b.stop();
      await e.close();
    }
  });

  test('falls back to GET /v1/models when /health answers 404, and stays there', async () => {
    const e = await startFakeEngine({ healthEndpoint: false });
    const { lines, log } = logger();
    const b = new OpenAIBackend(info, descriptor, { url: e.url }, log, { healthIntervalMs: 30 });
    try {
      await b.start();
      assert.equal(b.state, 'healthy');
      assert.equal(b.healthPath, '/v1/models');
      assert.equal(lines.filter((l) => l.includes('no GET /health')).length, 1);
      await waitFor(() => e.count('/v1/models') >= 3, { what: 'more /v1/models probes' });
      assert.equal(e.count('/health'), 1);
      e.setHealthStatus(500);
      await waitFor(() => b.state === 'unhealthy', { what: 'unhealthy through /v1/models' });
    } finally {
      await b.stop();
      await e.close();
    }
  });

  test('an engine still loading (503 before ever healthy) is starting, not unhealthy', async () => {
    const e = await startFakeEngine({ loadingMs: 60_000 });
    const { log } = logger();
    const b = new OpenAIBackend(info, descriptor, { url: e.url }, log, { healthIntervalMs: 30 });
    try {
      await b.start();
      assert.equal(b.state, 'starting');
      assert.match(b.reason, /loading/);
      e.setLoading(false);
      await waitFor(() => b.state === 'healthy', { what: 'healthy after load' });
      e.setLoading(true);
      await waitFor(() => b.state === 'unhealthy', { what: 'unhealthy on 503 after having been healthy' });
    } finally {
      await b.stop();
      await e.close();
    }
  });

  test('start() never throws, also for a URL where nothing listens', async () => {
    const e = await startFakeEngine();
    const url = e.url;
    await e.close();
    const { log } = logger();
    const b = new OpenAIBackend(info, descriptor, { url }, log, { healthIntervalMs: 1000 });
    await b.start();
    assert.equal(b.state, 'unhealthy');
    await b.stop();
  });

  test('onProps can withdraw a workload before the backend turns healthy', async () => {
    const e = await startFakeEngine({ buildInfo: 'b1000-old' });
    const { log } = logger();
    const seen: string[] = [];
    const b = new OpenAIBackend(info, { workloads: ['chat', 'rerank'], audio: false }, { url: e.url }, log, {
      healthIntervalMs: 1000,
      onProps: (p) => (p.buildNumber! < 2000 ? { workloads: ['chat'], audio: false } : undefined),
    });
    b.on('state', (s: string) => {
      if (s === 'healthy') seen.push(b.descriptor.workloads.join(','));
    });
    try {
      await b.start();
      assert.deepEqual(seen, ['chat']);
    } finally {
      await b.stop();
      await e.close();
    }
  });
});
