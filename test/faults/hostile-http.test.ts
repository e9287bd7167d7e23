/**
 * Issue 9, acceptance 1: a node under 1,000+ generated hostile requests
 * (broken and deep JSON, wrong types, huge names, bad multipart, header
 * floods, smuggling shapes, CONNECT, absurd query strings) answers every one
 * with a 4xx in the OpenAI error shape (a JSON body where Node's own parser
 * answers), never crashes, keeps its heap and its /metrics series bounded,
 * and still serves a good request afterwards.
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import v8 from 'node:v8';
import vm from 'node:vm';
import { request } from 'undici';
import { seeded } from '../helpers/random.ts';
import { startNode, type TestNode } from '../helpers/node.ts';

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;

type Rnd = () => number;
const pick = <T>(r: Rnd, xs: readonly T[]): T => xs[Math.floor(r() * xs.length)];

interface Shot {
  kind: string;
  /** Raw bytes for a socket, or an HTTP request for undici. */
  raw?: string;
  method?: string;
  path?: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
}

function hostile(r: Rnd, i: number): Shot {
  const good = '{"model":"demo","messages":[{"role":"user","content":"hi"}]}';
  switch (i % 12) {
    case 0: {
      let t = good;
      for (let k = 0; k < 3; k++) {
        const at = Math.floor(r() * t.length);
        t = t.slice(0, at) + pick(r, ['{', '"', ',', ']', '\\', '\u0000', '']) + t.slice(at + 1);
      }
      // A mutation that still parses as an object with a served model is no longer hostile: make it unknown.
      return { kind: 'broken json', path: '/v1/chat/completions', body: t.replace('"demo"', '"d3mo"') };
    }
    case 1:
      return { kind: 'deep json', path: '/v1/chat/completions', body: `{"model":"demo","stream":true,"x":${'['.repeat(5000 + Math.floor(r() * 50_000))}` };
    case 2:
      return { kind: 'wrong types', path: pick(r, ['/v1/chat/completions', '/v1/embeddings', '/v1/completions']), body: JSON.stringify({ model: pick(r, [123, null, ['demo'], { name: 'demo' }, true, '']), messages: 5 }) };
    case 3:
      return { kind: 'huge name', path: '/v1/chat/completions', body: JSON.stringify({ model: `m-${i}-${'x'.repeat(300 + Math.floor(r() * 100_000))}`, messages: [] }) };
    case 4:
      return { kind: 'unknown model', path: '/v1/chat/completions', body: JSON.stringify({ model: `nosuch-${i}-${r()}`, messages: [] }) };
    case 5:
      return {
        kind: 'bad multipart',
        path: '/v1/audio/transcriptions',
        headers: { 'content-type': pick(r, ['multipart/form-data; boundary=zzz', 'multipart/form-data', 'multipart/form-data; boundary=']) },
        body: pick(r, ['--zzz\r\nContent-Disposition: form-data; name="file"\r\n\r\nabc', 'garbage', '--zzz--\r\n', '']),
      };
    case 6:
      return { kind: 'header flood', raw: `GET /v1/models HTTP/1.1\r\nHost: x\r\n${Array.from({ length: 2000 }, (_, k) => `X-H${k}: ${'v'.repeat(40)}\r\n`).join('')}\r\n` };
    case 7:
      return {
        kind: 'smuggling',
        raw: pick(r, [
          `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n`,
          `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\n{"a":1}`,
          `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n5\r\nhello\r\n0\r\n\r\n`,
          `GET /v1/models HTTP/1.1\r\nHost: x\r\n Folded: header\r\n\r\n`,
          `GARBAGE\r\n\r\n`,
        ]),
      };
    case 8:
      return { kind: 'connect', raw: `CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: 127.0.0.1:22\r\n\r\n` };
    case 9:
      return {
        kind: 'absurd query',
        path: pick(r, [
          `/v1/chat/completions?${'host=a&'.repeat(200)}`,
          `/v1/chat/completions?prefer=${'n,'.repeat(50)}`,
          `/v1/chat/completions?host=${'%ff'.repeat(500)}`,
          `/v1/chat/completions?host=127.0.0.1:8086`,
          `/v1/chat/completions?prefer=http://evil/`,
        ]),
        body: good,
      };
    case 10: {
      const path = pick(r, ['/v1/chat/completions', '/v1/embeddings', '/health', '/', '/node', '/metrics']);
      const wrong = path.startsWith('/v1/') ? ['GET', 'PUT', 'DELETE', 'PATCH'] : ['POST', 'PUT', 'DELETE', 'PATCH'];
      return { kind: 'wrong method', method: pick(r, wrong), path };
    }
    default:
      return { kind: 'unknown path', method: pick(r, ['GET', 'POST']), path: `/${pick(r, ['v1', 'v2', '..', '%2e%2e', 'v1/chat'])}/${'x'.repeat(Math.floor(r() * 2000))}`, body: pick(r, [undefined, good]) };
  }
}

function sendRaw(port: number, raw: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1');
    let got = '';
    const timer = setTimeout(() => (sock.destroy(), reject(new Error(`no answer to ${JSON.stringify(raw.slice(0, 60))}`))), 10_000);
    sock.on('data', (d) => (got += d.toString('latin1')));
    sock.on('error', () => {});
    sock.on('close', () => {
      clearTimeout(timer);
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(got)?.[1] ?? 0);
      resolve({ status, body: got.slice(got.indexOf('\r\n\r\n') + 4) });
    });
    sock.write(raw);
    // Node answers a parse error and closes; a well-formed request gets an answer on a kept-alive socket, so end ours.
    setTimeout(() => sock.end(), 500).unref();
  });
}

async function fire(t: TestNode, s: Shot): Promise<{ status: number; body: string }> {
  if (s.raw) return sendRaw(Number(new URL(t.url).port), s.raw);
  const r = await request(`${t.url}${s.path}`, {
    method: (s.method ?? 'POST') as 'POST',
    headers: { 'content-type': 'application/json', ...s.headers },
    body: s.method && s.method !== 'POST' ? undefined : (s.body ?? '{}'),
  });
  return { status: r.statusCode, body: await r.body.text() };
}

function seriesCount(metrics: string): number {
  return metrics.split('\n').filter((l) => l && !l.startsWith('#')).length;
}

describe('hostile input', () => {
  let t: TestNode;
  before(async () => {
    t = await startNode({
      models: [{ name: 'demo', engine: 'sim', parallel: 2, workloads: ['chat', 'completion'], sim: { ttft_ms: 1, prefill_ms_per_1k: 1, tokens_per_s: 5000, output_tokens: 2 } }],
    });
  });
  after(() => t?.stop());

  it('answers 1,200 generated hostile requests with 4xx in the OpenAI shape, bounded in memory and metrics, and keeps serving', async () => {
    const r = seeded(99);
    const metrics = async () => (await (await request(`${t.url}/metrics`)).body.text());
    const heapAfterGc = () => (gc(), gc(), process.memoryUsage().heapUsed);
    const rounds = 4;
    const perRound = 300;
    const heaps: number[] = [];
    const series: number[] = [];
    const failures: string[] = [];
    for (let round = 0; round < rounds; round++) {
      for (let i = 0; i < perRound; i += 10) {
        const shots = Array.from({ length: 10 }, (_, k) => hostile(r, round * perRound + i + k));
        const answers = await Promise.all(shots.map((s) => fire(t, s)));
        answers.forEach((a, k) => {
          const s = shots[k];
          let shaped = false;
          try {
            const doc = JSON.parse(a.body) as { error?: { message?: unknown } };
            shaped = typeof doc.error?.message === 'string';
          } catch {
            shaped = false;
          }
          if (!(a.status >= 400 && a.status < 500) || !shaped) failures.push(`${s.kind}: ${a.status} ${a.body.slice(0, 120)} for ${JSON.stringify((s.raw ?? `${s.method ?? 'POST'} ${s.path}`).slice(0, 80))}`);
        });
      }
      heaps.push(heapAfterGc());
      series.push(seriesCount(await metrics()));
    }
    assert.deepEqual(failures.slice(0, 10), [], `${failures.length} of ${rounds * perRound} not answered 4xx in shape`);
    // After the first round has created every label the node will ever make, nothing grows with what clients send.
    assert.equal(series[rounds - 1], series[1], `metric series per round: ${series.join(', ')}`);
    assert.ok(heaps[rounds - 1] < heaps[1] * 1.1 + 4e6, `heap after GC per round (MB): ${heaps.map((h) => (h / 1e6).toFixed(1)).join(', ')}`);
    const ok = await request(`${t.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"model":"demo","messages":[{"role":"user","content":"still there?"}]}' });
    assert.equal(ok.statusCode, 200);
    await ok.body.text();
  });
});
