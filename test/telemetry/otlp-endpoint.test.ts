/**
 * Issue 44, item 2: OTLP endpoints as OpenTelemetry's convention has them.
 * A base URL (`http://collector:4318`) posts to `/v1/traces`, not to `/`
 * (which a real collector answers 404); when the config is silent the
 * standard OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
 * are honoured; an export the collector refuses is logged with its status
 * and counted in /metrics. Real nodes, and a collector here that answers as
 * a real one does: 200 on /v1/traces, 404 elsewhere (or 500 when told to).
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { tracesUrl } from '../../src/telemetry/tracing.ts';
import { waitFor } from '../fakes/wait.ts';
import { startMeshNode, stopAll, type MeshNode } from '../helpers/mesh.ts';

const COLLECTOR = { host: '127.0.144.40', port: 4318 };
const BASE = `http://${COLLECTOR.host}:${COLLECTOR.port}`;
const sim = { ttft_ms: 1, prefill_ms_per_1k: 1, tokens_per_s: 1000, output_tokens: 2 };

describe('the traces URL (pure)', () => {
  it('adds /v1/traces to a base URL, keeps a path given, and reads the OTEL_* variables when the config is silent', () => {
    assert.equal(tracesUrl('http://c:4318', {}), 'http://c:4318/v1/traces');
    assert.equal(tracesUrl('http://c:4318/', {}), 'http://c:4318/v1/traces');
    assert.equal(tracesUrl('http://c:4318/custom/traces', {}), 'http://c:4318/custom/traces');
    assert.equal(tracesUrl('', {}), '');
    assert.equal(tracesUrl('', { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }), 'http://c:4318/v1/traces');
    assert.equal(tracesUrl('', { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318/otlp/' }), 'http://c:4318/otlp/v1/traces');
    assert.equal(tracesUrl('', { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://t:4318/x' }), 'http://t:4318/x');
    assert.equal(tracesUrl('http://conf:4318', { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://env:4318' }), 'http://conf:4318/v1/traces', 'the config wins');
  });
});

describe('exporting to a collector by its base URL', () => {
  const paths: string[] = [];
  let failing = false;
  let collector: http.Server;
  const nodes: MeshNode[] = [];

  before(async () => {
    collector = http.createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        paths.push(`${req.method} ${req.url}`);
        const status = req.url !== '/v1/traces' ? 404 : failing ? 500 : 200;
        res.writeHead(status, { 'content-type': 'application/x-protobuf' });
        res.end();
      });
    });
    await new Promise<void>((r) => collector.listen(COLLECTOR.port, COLLECTOR.host, r));
  });
  after(async () => {
    await stopAll(nodes);
    collector.closeAllConnections();
    await new Promise((r) => collector.close(r));
  });

  const chat = (n: MeshNode) => request(`${n.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }) }).then((r) => r.body.text());

  it('telemetry.otlp_endpoint without a path posts to /v1/traces', async () => {
    const n = await startMeshNode({ name: 'otlp-conf', ip: '127.0.144.41', telemetry: { otlp_endpoint: BASE, sample: 1 }, models: [{ name: 'm', engine: 'sim', parallel: 1, sim }] });
    nodes.push(n);
    await chat(n);
    await waitFor(() => paths.includes('POST /v1/traces'), { timeoutMs: 15_000, what: 'an export to /v1/traces' });
    assert.ok(!paths.includes('POST /'), `posted to the root: ${paths.join(', ')}`);
  });

  it('with the config silent, OTEL_EXPORTER_OTLP_ENDPOINT is honoured; a refused export is logged with its status and counted', async () => {
    const n = await startMeshNode({ name: 'otlp-env', ip: '127.0.144.42', env: { OTEL_EXPORTER_OTLP_ENDPOINT: BASE }, telemetry: { sample: 1 }, models: [{ name: 'm', engine: 'sim', parallel: 1, sim }] });
    nodes.push(n);
    const before = paths.length;
    await chat(n);
    await waitFor(() => paths.slice(before).includes('POST /v1/traces'), { timeoutMs: 15_000, what: 'an export from the env-configured node' });
    failing = true;
    await chat(n);
    await waitFor(() => /OpenTelemetry export to http:\/\/127\.0\.144\.40:4318\/v1\/traces failed: the collector answered 500/.test(n.logs()), { timeoutMs: 15_000, what: 'the failure in the log' });
    const metrics = await (await request(`${n.url}/metrics`)).body.text();
    const m = /^viiwork_otlp_export_failures_total (\d+)/m.exec(metrics);
    assert.ok(m && Number(m[1]) >= 1, `no failure counted: ${metrics.split('\n').filter((l) => l.includes('otlp')).join(' | ')}`);
  });
});
