/**
 * Issue 27, item 4: OpenTelemetry traces across the hop. Two real nodes in
 * a secured mesh export OTLP/HTTP (protobuf) to a receiver here that
 * decodes every payload with the official opentelemetry-proto definitions.
 * A request entering the gateway and running on the member is one trace:
 * the entry's span (continuing the client's traceparent) with queue, route
 * and forward under it, and the executor's span under the entry's across
 * the hop with slot, prefill and decode, carrying the GenAI attributes. A
 * junk traceparent is ignored; every request is a trace of its own.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import http from 'node:http';
import { createRequire } from 'node:module';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { waitFor } from '../fakes/wait.ts';
import { startSeeded, stopAll, waitModelOn, type MeshNode } from '../helpers/mesh.ts';

const root = createRequire(import.meta.url)('otlp-proto-0.57/build/src/generated/root.js');
const ExportTraceServiceRequest = root.opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest;

const IP = (i: number) => `127.0.27.${i}`;
const RECEIVER = { host: IP(40), port: 4318 };
const SECRET = crypto.randomBytes(32).toString('base64');

interface Got {
  node: string;
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  attrs: Record<string, unknown>;
}

const hex = (b: Uint8Array | undefined) => Buffer.from(b ?? []).toString('hex');

function valueOf(v: any): unknown {
  // AnyValue is a oneof: protobufjs names the member that is set in `value`; int64 comes as a Long.
  const k = v?.value as string | undefined;
  if (!k) return undefined;
  const x = v[k];
  return x !== null && typeof x === 'object' && typeof x.toNumber === 'function' ? x.toNumber() : x;
}

describe('OpenTelemetry traces across the hop, decoded from OTLP', () => {
  const spans: Got[] = [];
  const contentTypes = new Set<string>();
  let receiver: http.Server;
  const nodes: MeshNode[] = [];

  before(async () => {
    receiver = http.createServer((req, res) => {
      const parts: Buffer[] = [];
      req.on('data', (d) => parts.push(d));
      req.on('end', () => {
        contentTypes.add(String(req.headers['content-type']));
        const msg = ExportTraceServiceRequest.decode(Buffer.concat(parts));
        for (const rs of msg.resourceSpans) {
          const node = String(valueOf(rs.resource.attributes.find((a: any) => a.key === 'service.instance.id')?.value));
          for (const ss of rs.scopeSpans)
            for (const s of ss.spans)
              spans.push({ node, traceId: hex(s.traceId), spanId: hex(s.spanId), parentSpanId: hex(s.parentSpanId), name: s.name, kind: s.kind, attrs: Object.fromEntries(s.attributes.map((a: any) => [a.key, valueOf(a.value)])) });
        }
        res.writeHead(200, { 'content-type': 'application/x-protobuf' });
        res.end();
      });
    });
    await new Promise<void>((r) => receiver.listen(RECEIVER.port, RECEIVER.host, r));
    const telemetry = { otlp_endpoint: `http://${RECEIVER.host}:${RECEIVER.port}/v1/traces`, sample: 1 };
    await startSeeded(nodes, [
      { name: 'tr-gw', ip: IP(41), env: { VIIWORK_MESH_SECRET: SECRET }, telemetry },
      { name: 'tr-ex', ip: IP(42), env: { VIIWORK_MESH_SECRET: SECRET }, telemetry, models: [{ name: 'chat-sim', engine: 'sim', parallel: 2, workloads: ['chat'], sim: { ttft_ms: 20, prefill_ms_per_1k: 5, tokens_per_s: 400, output_tokens: 6 } }] },
    ]);
    await waitModelOn(nodes[0], 'chat-sim', ['tr-ex']);
  });
  after(async () => {
    await stopAll(nodes);
    receiver?.closeAllConnections();
    await new Promise((r) => receiver?.close(r));
  });

  const ask = async (traceparent?: string, stream = false) => {
    const r = await request(`${nodes[0].url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(traceparent !== undefined ? { traceparent } : {}) },
      body: JSON.stringify({ model: 'chat-sim', stream, messages: [{ role: 'user', content: 'trace me' }] }),
    });
    await r.body.text();
    assert.equal(r.statusCode, 200);
    assert.equal(r.headers['x-viiwork-node'], 'tr-ex', 'it ran on the member');
  };

  it('one trace per request: the client’s trace continued, entry and executor spans parented across the hop, GenAI attributes', async () => {
    const clientTrace = crypto.randomBytes(16).toString('hex');
    const clientSpan = crypto.randomBytes(8).toString('hex');
    await ask(`00-${clientTrace}-${clientSpan}-01`, true);
    await waitFor(() => spans.filter((s) => s.traceId === clientTrace).length >= 7, { timeoutMs: 20_000, what: 'the spans of the traced request' });
    assert.deepEqual([...contentTypes], ['application/x-protobuf'], 'OTLP/HTTP with protobuf');
    const mine = spans.filter((s) => s.traceId === clientTrace);
    const entry = mine.find((s) => s.node === 'tr-gw' && s.parentSpanId === clientSpan)!;
    assert.ok(entry, `the entry span continues the client's span: ${JSON.stringify(mine.map((s) => [s.node, s.name, s.parentSpanId]))}`);
    assert.equal(entry.name, 'chat chat-sim');
    assert.equal(entry.kind, 2, 'SERVER');
    assert.equal(entry.attrs['gen_ai.operation.name'], 'chat');
    assert.equal(entry.attrs['gen_ai.request.model'], 'chat-sim');
    const under = (p: Got) => mine.filter((s) => s.parentSpanId === p.spanId);
    assert.deepEqual(under(entry).filter((s) => s.node === 'tr-gw').map((s) => s.name).sort(), ['forward', 'route']);
    const executor = under(entry).find((s) => s.node === 'tr-ex')!;
    assert.ok(executor, 'the executor span is a child of the entry span, across the hop');
    assert.equal(executor.name, 'chat chat-sim');
    assert.equal(executor.attrs['gen_ai.operation.name'], 'chat');
    assert.equal(executor.attrs['gen_ai.request.model'], 'chat-sim');
    assert.ok(Number(executor.attrs['gen_ai.usage.input_tokens']) > 0, `input tokens: ${JSON.stringify(executor.attrs)}`);
    assert.equal(executor.attrs['gen_ai.usage.output_tokens'], 6, 'output tokens');
    assert.equal(typeof executor.attrs['gen_ai.usage.cache_read.input_tokens'], 'number', 'cached input tokens');
    assert.deepEqual(under(executor).map((s) => s.name).sort(), ['decode', 'prefill', 'slot']);
  });

  it('a junk traceparent is ignored (a new trace), and every request is one trace of its own', async () => {
    const before = new Set(spans.map((s) => s.traceId));
    for (const junk of ['zzz', '00-00000000000000000000000000000000-0000000000000000-01', `ff-${'a'.repeat(32)}-${'b'.repeat(16)}-01`, '00-ABC', 'x'.repeat(2000)]) await ask(junk);
    await ask(undefined);
    const entries = () => spans.filter((s) => !before.has(s.traceId) && s.node === 'tr-gw' && s.kind === 2);
    // Each node exports on its own schedule: wait for the entry spans and for their executors' too.
    const executorOf = (e: Got) => spans.find((x) => x.traceId === e.traceId && x.node === 'tr-ex' && x.kind === 2);
    await waitFor(() => entries().length >= 6 && entries().every(executorOf), { timeoutMs: 20_000, what: 'six entry spans and their executor spans' });
    const e = entries();
    assert.equal(new Set(e.map((s) => s.traceId)).size, 6, 'six requests, six traces');
    for (const s of e) assert.equal(s.parentSpanId, '', 'a junk or missing traceparent starts a trace of its own');
    for (const s of e) assert.equal(executorOf(s)?.parentSpanId, s.spanId, 'each executor span under its own entry span');
  });
});
