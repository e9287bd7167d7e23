/**
 * Issue 28: the newest surfaces, as hard as the old. One real node (a sim
 * engine, client keys on) over real HTTP and raw sockets: a body that
 * trickles in forever hits api.body_timeout; a client holding many
 * unfinished bodies open is refused past api.max_open_bodies (and neither
 * takes a slot); the auth scheme is case-insensitive on every endpoint;
 * Content-Encoding gzip and deflate are decoded within api.max_body, a
 * false or unknown one is refused.
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import zlib from 'node:zlib';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { waitFor } from '../fakes/wait.ts';
import { startNode, type TestNode } from '../helpers/node.ts';

const KEY = 'sk-surfaces-28';
const auth = { authorization: `Bearer ${KEY}` };
const chatBody = JSON.stringify({ model: 'demo', messages: [{ role: 'user', content: 'hi' }] });
const messagesBody = JSON.stringify({ model: 'demo', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] });

async function post(t: TestNode, path: string, body: string | Buffer, headers: Record<string, string> = {}) {
  const r = await request(`${t.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...auth, ...headers }, body });
  return { status: r.statusCode, headers: r.headers, text: await r.body.text() };
}

/** A raw socket that sends the headers and `first`, then nothing (or one byte every `dripMs`). */
function slowUpload(t: TestNode, path: string, first: string, dripMs = 0, length = 60_000) {
  const port = Number(new URL(t.url).port);
  const sock = net.connect(port, '127.0.0.1');
  let answer = '';
  sock.on('data', (d) => (answer += d.toString('latin1')));
  sock.on('error', () => {});
  const closed = new Promise<void>((resolve) => sock.once('close', () => resolve()));
  sock.write(`POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\n\r\n${first}`);
  const drip = dripMs > 0 ? setInterval(() => sock.writable && sock.write(' '), dripMs) : undefined;
  return {
    closed,
    answer: () => answer,
    end() {
      clearInterval(drip);
      sock.destroy();
    },
    stopDrip: () => clearInterval(drip),
  };
}

describe('issue 28: body deadlines, the auth scheme and content encodings', () => {
  let t: TestNode;
  before(async () => {
    process.env.SURFACES_28_KEYS = KEY;
    t = await startNode({
      node: { name: 's28' },
      // Idle timeout longer than the deadline: only the whole-body deadline can end a trickle.
      api: { keys_env: 'SURFACES_28_KEYS', header_timeout: '1s', body_idle_timeout: '30s', body_timeout: '1500ms', max_open_bodies: 2, max_body: '64KiB' },
      // One slot and no queue: a body being read that held a slot or queue place would make the next request 429.
      routing: { queue_max: 0 },
      models: [{ name: 'demo', engine: 'sim', parallel: 1, workloads: ['chat', 'completion'], sim: { ttft_ms: 1, prefill_ms_per_1k: 1, tokens_per_s: 5000, output_tokens: 2 } }],
    });
  });
  after(() => t?.stop());

  it('a body trickling in one byte at a time gets 408 with Retry-After once api.body_timeout passes, and the connection closes', async () => {
    const up = slowUpload(t, '/v1/messages', '{', 200);
    await up.closed;
    up.end();
    assert.match(up.answer(), /^HTTP\/1\.1 408/);
    assert.match(up.answer(), /retry-after: \d+/i);
    assert.match(up.answer(), /api\.body_timeout/);
    // The Messages path answers in Anthropic's shape.
    assert.match(up.answer(), /"type":"error"/);
  });

  it('a body declared over api.max_body is 413, and a rest that trickles on is not waited for past api.body_timeout', async () => {
    const up = slowUpload(t, '/v1/chat/completions', '{', 200, 10_000_000);
    await up.closed;
    up.end();
    assert.match(up.answer(), /^HTTP\/1\.1 413/);
  });

  it('on every endpoint, a body that trickles on after its answer is not read past api.header_timeout + api.body_timeout', async () => {
    // Paths that answer without reading the body: unknown, wrong method, no key, a GET route, a dashboard.
    const paths: [string, string, RegExp][] = [
      ['POST', '/v1/nothing-here', /^HTTP\/1\.1 404/],
      ['PUT', '/v1/chat/completions', /^HTTP\/1\.1 405/],
      ['GET', '/v1/models', /^HTTP\/1\.1 200/],
      ['POST', '/health', /^HTTP\/1\.1 405/],
      ['DELETE', '/v1/aliases/x', /^HTTP\/1\.1 (403|404|405)/],
    ];
    const port = Number(new URL(t.url).port);
    await Promise.all(
      paths.map(async ([method, path, status]) => {
        const sock = net.connect(port, '127.0.0.1');
        let answer = '';
        sock.on('data', (d) => (answer += d.toString('latin1')));
        sock.on('error', () => {});
        const closed = new Promise<void>((resolve) => sock.once('close', () => resolve()));
        sock.write(`${method} ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n\r\n{`);
        const drip = setInterval(() => sock.writable && sock.write(' '), 200);
        await closed;
        clearInterval(drip);
        assert.match(answer, status, `${method} ${path}: ${answer.slice(0, 200)}`);
      }),
    );
  });

  it('past api.max_open_bodies unfinished bodies from one address, the next is 503 with Retry-After; none holds a slot', async () => {
    const ups = [slowUpload(t, '/v1/chat/completions', '{"model":'), slowUpload(t, '/v1/messages', '{')];
    try {
      await waitFor(() => t.node.openBodies.count('127.0.0.1') === 2, { what: 'two bodies open', timeoutMs: 10_000 });
      const third = await post(t, '/v1/chat/completions', chatBody);
      assert.equal(third.status, 503, third.text);
      assert.ok(Number(third.headers['retry-after']) >= 1);
      assert.match(JSON.parse(third.text).error.message, /api\.max_open_bodies/);
    } finally {
      for (const u of ups) u.end();
    }
    await waitFor(() => t.node.openBodies.count('127.0.0.1') === 0, { what: 'bodies closed', timeoutMs: 10_000 });
    // While one slow upload is open, a whole request still finds the one slot free (no queue: it would be 429).
    const up = slowUpload(t, '/v1/chat/completions', '{"model":');
    try {
      await waitFor(() => t.node.openBodies.count('127.0.0.1') === 1, { what: 'one body open', timeoutMs: 10_000 });
      const ok = await post(t, '/v1/chat/completions', chatBody);
      assert.equal(ok.status, 200, ok.text);
    } finally {
      up.end();
    }
  });

  it('compares the auth scheme case-insensitively on every endpoint', async () => {
    for (const scheme of ['bearer', 'BEARER', 'BeArEr']) {
      const h = { authorization: `${scheme} ${KEY}` };
      assert.equal((await post(t, '/v1/chat/completions', chatBody, h)).status, 200, scheme);
      assert.equal((await post(t, '/v1/messages', messagesBody, h)).status, 200, scheme);
      const models = await request(`${t.url}/v1/models`, { headers: h });
      assert.equal(models.statusCode, 200, scheme);
      await models.body.text();
      const load = await post(t, '/v1/models/demo/load', '', h);
      assert.notEqual(load.status, 401, load.text);
    }
    // The key itself is still exact.
    assert.equal((await post(t, '/v1/chat/completions', chatBody, { authorization: `bearer ${KEY.toUpperCase()}` })).status, 401);
  });

  it('decodes gzip and deflate bodies; a false encoding is 400, an unknown one 415, a bomb 413', async () => {
    const gz = await post(t, '/v1/chat/completions', zlib.gzipSync(chatBody), { 'content-encoding': 'gzip' });
    assert.equal(gz.status, 200, gz.text);
    const df = await post(t, '/v1/messages', zlib.deflateSync(messagesBody), { 'content-encoding': 'deflate' });
    assert.equal(df.status, 200, df.text);
    const upper = await post(t, '/v1/chat/completions', zlib.gzipSync(chatBody), { 'content-encoding': 'GZIP' });
    assert.equal(upper.status, 200, upper.text);

    const fake = await post(t, '/v1/chat/completions', chatBody, { 'content-encoding': 'gzip' });
    assert.equal(fake.status, 400, fake.text);
    assert.match(JSON.parse(fake.text).error.message, /gzip/);
    const br = await post(t, '/v1/chat/completions', zlib.brotliCompressSync(chatBody), { 'content-encoding': 'br' });
    assert.equal(br.status, 415, br.text);
    assert.match(JSON.parse(br.text).error.message, /"br"/);
    const brMessages = await post(t, '/v1/messages', messagesBody, { 'content-encoding': 'compress' });
    assert.equal(brMessages.status, 415, brMessages.text);
    assert.equal(JSON.parse(brMessages.text).type, 'error');

    // 16 MiB of spaces compress to about 16 KiB: far under max_body (64 KiB) on the wire, far over it decoded.
    const bomb = zlib.gzipSync(Buffer.concat([Buffer.from('{"model":"demo","x":"'), Buffer.alloc(16 * 1024 * 1024, 0x20), Buffer.from('"}')]));
    assert.ok(bomb.length < 64 * 1024);
    const big = await post(t, '/v1/chat/completions', bomb, { 'content-encoding': 'gzip' });
    assert.equal(big.status, 413, big.text);
    assert.match(JSON.parse(big.text).error.message, /api\.max_body/);
    // Still serving.
    assert.equal((await post(t, '/v1/chat/completions', chatBody)).status, 200);
  });
});
