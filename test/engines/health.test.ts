import assert from 'node:assert/strict';
import net from 'node:net';
import { describe, test } from 'node:test';
import { classifyError, fetchProps, formatMs, normalizeBaseUrl, parseBuildNumber, probe, Ticker } from '../../src/engines/health.ts';
import { startFakeEngine } from '../fakes/fake-engine.ts';
import { waitFor } from '../fakes/wait.ts';

describe('health helpers', () => {
  test('parseBuildNumber reads llama.cpp build_info', () => {
    assert.equal(parseBuildNumber('b4500-abcdef'), 4500);
    assert.equal(parseBuildNumber('b6000'), 6000);
    assert.equal(parseBuildNumber('v1.2.3'), undefined);
    // A squashed source (node-llama-cpp's bundle) and a git-less build: unknown, not build 1 or 0.
    assert.equal(parseBuildNumber('b1-de3ff81'), undefined);
    assert.equal(parseBuildNumber('b0-unknown'), undefined);
    assert.equal(parseBuildNumber(undefined), undefined);
  });

  test('normalizeBaseUrl drops a trailing slash and /v1', () => {
    assert.equal(normalizeBaseUrl('http://h:1/'), 'http://h:1');
    assert.equal(normalizeBaseUrl('http://h:1/v1/'), 'http://h:1');
    assert.equal(normalizeBaseUrl('http://h:1/api/v1'), 'http://h:1/api');
  });

  test('formatMs', () => {
    assert.equal(formatMs(600_000), '10m');
    assert.equal(formatMs(1500), '1.5s');
    assert.equal(formatMs(300), '300ms');
  });

  test('probe classifies ok, status, refused, reset and timeout', async () => {
    const e = await startFakeEngine({ loadingMs: 60_000 });
    try {
      assert.deepEqual(await probe(e.url, '/v1/models').then((o) => o.kind), 'ok');
      const s = await probe(e.url, '/health');
      assert.equal(s.kind, 'status');
      assert.equal(s.kind === 'status' && s.status, 503);
      assert.equal(s.kind === 'status' && s.message, 'Loading model');
      const props = await fetchProps(e.url);
      assert.equal(props?.buildNumber, 4500);
      assert.equal(props?.totalSlots, 4);
    } finally {
      await e.close();
    }
    assert.equal((await probe(e.url, '/health')).kind, 'refused');

    // A server that accepts and closes at once: a reset; one that never answers: a timeout.
    const sockets = new Set<net.Socket>();
    const resetter = net.createServer((s) => s.destroy()).listen(0, '127.0.0.1');
    const silent = net.createServer((s) => void sockets.add(s)).listen(0, '127.0.0.1');
    await Promise.all([resetter, silent].map((srv) => new Promise((r) => srv.once('listening', r))));
    try {
      const port = (srv: net.Server) => (srv.address() as net.AddressInfo).port;
      assert.equal((await probe(`http://127.0.0.1:${port(resetter)}`, '/health')).kind, 'reset');
      assert.equal((await probe(`http://127.0.0.1:${port(silent)}`, '/health', { timeoutMs: 200 })).kind, 'timeout');
    } finally {
      for (const s of sockets) s.destroy();
      resetter.close();
      silent.close();
    }
    assert.equal(classifyError(Object.assign(new Error('x'), { code: 'ECONNREFUSED' })).kind, 'refused');
  });

  test('Ticker never runs two at once and stops', async () => {
    let running = 0;
    let max = 0;
    let runs = 0;
    const t = new Ticker(async () => {
      running++;
      max = Math.max(max, running);
      await new Promise((r) => setTimeout(r, 30));
      running--;
      runs++;
    }, 1);
    t.start(0);
    await waitFor(() => runs >= 3, { what: 'three runs' });
    t.stop();
    assert.equal(max, 1);
    assert.equal(t.running, false);
  });
});
