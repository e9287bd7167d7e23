/**
 * Issue 9, acceptance 3 and 4: a forwarded stream whose executor freezes
 * mid-way ends with an SSE error event; an upload that stops arriving and a
 * client that stops reading are dropped within their bounds, and the slot is
 * free again.
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { startFakeEngine, type FakeEngine } from '../fakes/fake-engine.ts';
import { waitFor } from '../fakes/wait.ts';
import { getJson, startMeshNode, stopAll, waitConverged, waitModelOn, type MeshNode } from '../helpers/mesh.ts';

const IP = (n: number) => `127.0.27.${n}`;

async function busyOn(node: MeshNode, model: string): Promise<number> {
  const cap = await getJson<{ models: { name: string; busy: number }[] }>(`${node.url}/v1/capacity`);
  return cap.models.find((m) => m.name === model)?.busy ?? -1;
}

describe('stalls: frozen executors, stalled uploads, clients that stop reading', () => {
  let slowEngine: FakeEngine;
  let bigEngine: FakeEngine;
  let a: MeshNode, c: MeshNode;
  before(async () => {
    slowEngine = await startFakeEngine({ name: 'slow', outputTokens: 200, chunkDelayMs: 50 });
    bigEngine = await startFakeEngine({ name: 'big', outputTokens: 400_000 });
    const api = { body_idle_timeout: '1s', write_stall: '1s' };
    a = await startMeshNode({ name: 'A', ip: IP(1), api, routing: { stale_after: '1s' }, models: [{ name: 'big', engine: 'openai', url: bigEngine.url, parallel: 2 }] });
    c = await startMeshNode({ name: 'C', ip: IP(3), api, seeds: [a.gossip], models: [{ name: 'slow', engine: 'openai', url: slowEngine.url, parallel: 2 }] });
    await waitConverged([a, c]);
    await waitModelOn(a, 'slow', ['C']);
  });
  after(async () => {
    c?.proc.kill('SIGCONT');
    await stopAll([a, c]);
    await slowEngine?.close();
    await bigEngine?.close();
  });

  it('a stream through A ends with an SSE error event within stale_after + 2 s once its executor freezes', async () => {
    const r = await request(`${a.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'slow', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    });
    assert.equal(r.statusCode, 200);
    assert.equal(r.headers['x-viiwork-node'], 'C');
    let text = '';
    let frozenAt = 0;
    for await (const chunk of r.body) {
      text += chunk.toString();
      if (!frozenAt && text.includes('"content"')) {
        c.proc.kill('SIGSTOP');
        frozenAt = performance.now();
      }
    }
    const tookMs = performance.now() - frozenAt;
    c.proc.kill('SIGCONT');
    assert.match(text, /event: error\ndata: \{"error":\{"message":"member C went quiet/);
    assert.ok(tookMs < 3000 + 2000, `error event after ${Math.round(tookMs)} ms`);
  });

  it('an upload that stops arriving gets 408 within api.body_idle_timeout and the connection closes', async () => {
    const sock = net.connect(8086, IP(1));
    await new Promise((resolve) => sock.once('connect', resolve));
    let answer = '';
    sock.on('data', (d) => (answer += d));
    const closed = new Promise((resolve) => sock.once('close', resolve));
    sock.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: ${IP(1)}\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n{"model":"big","messages":[`);
    const t0 = performance.now();
    await closed;
    assert.match(answer, /^HTTP\/1\.1 408/);
    assert.match(answer, /"code":"request_timeout"/);
    assert.ok(performance.now() - t0 < 10_000);
  });

  it('a client that stops reading has its request cancelled within api.write_stall, and the slot is free again', async () => {
    const sock = net.connect(8086, IP(1));
    await new Promise((resolve) => sock.once('connect', resolve));
    const body = JSON.stringify({ model: 'big', stream: true, messages: [{ role: 'user', content: 'talk a lot' }] });
    sock.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: ${IP(1)}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    sock.pause(); // never read a byte
    const before = bigEngine.count('/v1/chat/completions');
    await waitFor(() => bigEngine.count('/v1/chat/completions') > before, { what: 'the engine got the request', timeoutMs: 10_000 });
    await waitFor(async () => (await busyOn(a, 'big')) === 0, { what: 'the slot freed after the write stall', timeoutMs: 15_000 });
    // Reading again shows what the node did: the connection was closed before the answer's end.
    let got = '';
    sock.on('data', (d) => (got += d.toString('latin1')));
    const closed = new Promise((resolve) => sock.once('close', resolve));
    sock.resume();
    await closed;
    assert.match(got, /^HTTP\/1\.1 200/);
    assert.doesNotMatch(got, /\[DONE\]/);
  });
});
