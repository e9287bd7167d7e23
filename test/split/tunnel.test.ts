/**
 * Issue 45, item 2 (SPEC 11, "A model bigger than one host"): the runner
 * reaches a lender's ggml-rpc-server, which listens on 127.0.0.1 only, through
 * the members-only tunnel between the two nodes: an Upgrade on the lender's
 * API port, signed like a forward, inside TLS with a key derived from the mesh
 * secret. Real sockets, the real ggml-rpc-server and llama-server: a tiny
 * model run through the tunnel answers exactly as it does on one host; a
 * caller without the mesh key reaches nothing.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { after, before, describe, it } from 'node:test';
import { createLog } from '../../src/log.ts';
import { MemberTable } from '../../src/mesh/members.ts';
import { memberHeaders } from '../../src/security/headers.ts';
import { loadMeshMode, newSecret, type MeshMode } from '../../src/security/secret.ts';
import { EMPTY_BODY_SHA256, RequestSigner, RequestVerifier } from '../../src/security/signing.ts';
import { dial, openTunnel, TUNNEL_PREFIX, TUNNEL_PROTOCOL, tunnelUpgrade, type Tunnel } from '../../src/split/tunnel.ts';
import { tunnelIdentity, tunnelKey } from '../../src/split/tunnel-tls.ts';
import { writeTinyGguf } from '../fakes/tiny-gguf.ts';
import { waitFor } from '../fakes/wait.ts';
import { realLlamaServer } from '../helpers/engine.ts';

const RUNNER_IP = '127.0.225.1';
const LENDER_IP = '127.0.225.2';
const STRANGER_IP = '127.0.225.3';
const engine = realLlamaServer();
const log = createLog('tunnel-test', { destination: fs.createWriteStream('/dev/null') });

/** The lender's member table, with the runner alive at RUNNER_IP. */
function lenderMembers(): MemberTable {
  const t = new MemberTable('lender');
  const meta = (api: number) => Buffer.from(JSON.stringify({ v: 2, api, role: 'node' }));
  t.update([
    { name: 'lender', addr: LENDER_IP, port: 7946, meta: meta(8080), state: 'alive' },
    { name: 'runner', addr: RUNNER_IP, port: 7946, meta: meta(8080), state: 'alive' },
  ]);
  return t;
}

/** A lender: an HTTP server whose upgrades go to the tunnel, lends by id to loopback ports. */
async function lender(mode: MeshMode, lends: Map<string, number>): Promise<{ url: string; server: http.Server }> {
  const handle = tunnelUpgrade({ mode, self: 'lender', members: lenderMembers(), lendPort: (id, member) => (member === 'runner' ? lends.get(id) : undefined), log });
  const server = http.createServer((_req, res) => res.writeHead(404).end());
  server.on('upgrade', (req, socket, head) => handle(req, socket, head) || socket.destroy());
  await new Promise<void>((r) => server.listen(0, LENDER_IP, r));
  return { url: `http://${LENDER_IP}:${(server.address() as net.AddressInfo).port}`, server };
}

/** A stand-in RPC server that records every byte reaching it (what a refused caller must never send it). */
async function recorder(): Promise<{ port: number; bytes: () => number; connections: () => number; close(): void }> {
  let bytes = 0;
  let connections = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((s) => {
    connections++;
    sockets.add(s);
    s.on('data', (d) => {
      bytes += d.length;
      s.write(d);
    });
    s.on('error', () => {});
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    port: (server.address() as net.AddressInfo).port,
    bytes: () => bytes,
    connections: () => connections,
    close: () => {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
}

/** A raw HTTP/1.1 upgrade from `localAddress` with `headers`: the status line the lender answers, or 101. */
function rawUpgrade(url: string, lendId: string, headers: Record<string, string>, localAddress = RUNNER_IP): Promise<{ status: number; body: string; socket?: net.Socket }> {
  return new Promise((resolve, reject) => {
    const req = http.request(new URL(`${TUNNEL_PREFIX}${lendId}`, url), { method: 'GET', localAddress, agent: false, headers: { connection: 'Upgrade', upgrade: TUNNEL_PROTOCOL, ...headers } });
    req.once('upgrade', (_res, socket) => resolve({ status: 101, body: '', socket: socket as net.Socket }));
    req.once('response', (res) => {
      let body = '';
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.once('error', reject);
    req.end();
  });
}

function secured(secret = newSecret()): MeshMode {
  return loadMeshMode({ VIIWORK_MESH_SECRET: secret }, false);
}

describe('the RPC tunnel between two nodes: members only', () => {
  const secret = newSecret();
  const mode = secured(secret);
  const lends = new Map<string, number>();
  let rec: Awaited<ReturnType<typeof recorder>>;
  let lend: Awaited<ReturnType<typeof lender>>;
  before(async () => {
    rec = await recorder();
    lends.set('lend-1', rec.port);
    lend = await lender(mode, lends);
  });
  after(() => {
    rec.close();
    lend.server.close();
  });

  it('carries bytes both ways for a member with the mesh key, encrypted on the wire', async () => {
    const stream = await dial({ mode, self: 'runner', member: 'lender', url: lend.url, lendId: 'lend-1' });
    assert.ok(stream instanceof tls.TLSSocket, 'a secured tunnel speaks TLS');
    assert.equal(stream.getProtocol(), 'TLSv1.3');
    const echoed = await new Promise<string>((resolve) => {
      stream.once('data', (d) => resolve(String(d)));
      stream.write('hello rpc');
    });
    assert.equal(echoed, 'hello rpc');
    stream.destroy();
  });

  it('refuses an upgrade with no member headers (403), a signature with another secret (401), a lend that does not exist (404); none reaches the RPC server', async () => {
    const before = rec.connections();
    const plain = await rawUpgrade(lend.url, 'lend-1', {});
    assert.equal(plain.status, 403, plain.body);
    assert.match(JSON.parse(plain.body).error.message, /members of this mesh only/);

    const other = secured();
    const forged = await rawUpgrade(lend.url, 'lend-1', memberHeaders(other, 'runner', 'GET', `${TUNNEL_PREFIX}lend-1`, EMPTY_BODY_SHA256, 'lender'));
    assert.equal(forged.status, 401, forged.body);

    const missing = await rawUpgrade(lend.url, 'nope', memberHeaders(mode, 'runner', 'GET', `${TUNNEL_PREFIX}nope`, EMPTY_BODY_SHA256, 'lender'));
    assert.equal(missing.status, 404, missing.body);
    assert.match(JSON.parse(missing.body).error.message, /no lend "nope"/);

    // A stranger signing as a member it is not still needs the secret: same 401.
    const stranger = await rawUpgrade(lend.url, 'lend-1', memberHeaders(other, 'runner', 'GET', `${TUNNEL_PREFIX}lend-1`, EMPTY_BODY_SHA256, 'lender'), STRANGER_IP);
    assert.equal(stranger.status, 401, stranger.body);
    assert.equal(rec.connections(), before, 'no refused caller opened a connection to the RPC server');
  });

  it('a valid signature replayed, or a TLS handshake with a wrong key, sends not one byte to the RPC server', async () => {
    const bytesBefore = rec.bytes();
    // The signature is right (a captured upgrade), the key is not: the TLS handshake fails.
    const wrongKey: MeshMode = { mode: 'secured', keys: [Buffer.alloc(32, 9)], signer: new RequestSigner(Buffer.from(secret, 'base64')), verifier: new RequestVerifier({ secrets: [Buffer.alloc(32, 9)] }) };
    await assert.rejects(dial({ mode: wrongKey, self: 'runner', member: 'lender', url: lend.url, lendId: 'lend-1' }), /TLS handshake failed/);

    // The same signed headers twice: the second is a replay (its nonce is spent).
    const headers = memberHeaders(mode, 'runner', 'GET', `${TUNNEL_PREFIX}lend-1`, EMPTY_BODY_SHA256, 'lender');
    const first = await rawUpgrade(lend.url, 'lend-1', headers);
    assert.equal(first.status, 101);
    // The raw socket after the 101 without TLS: plaintext sent into it must not reach the RPC server.
    first.socket!.write('plaintext rpc bytes, no TLS');
    const replay = await rawUpgrade(lend.url, 'lend-1', headers);
    assert.equal(replay.status, 401, replay.body);
    await waitFor(() => first.socket!.destroyed || first.socket!.readableEnded, { timeoutMs: 10_000, what: 'the lender to drop a connection that does not speak TLS' });
    assert.equal(rec.bytes(), bytesBefore, 'no byte of a caller without the key reached the RPC server');
  });

  it("takes a runner on the previous secret during a rotation, by the key's identity", async () => {
    const next = newSecret();
    const rotated = loadMeshMode({ VIIWORK_MESH_SECRET: next, VIIWORK_MESH_SECRET_PREV: secret }, false);
    const lend2 = await lender(rotated, lends);
    try {
      const stream = await dial({ mode, self: 'runner', member: 'lender', url: lend2.url, lendId: 'lend-1' });
      stream.destroy();
    } finally {
      lend2.server.close();
    }
    assert.notEqual(tunnelIdentity(tunnelKey(Buffer.from(secret, 'base64'))), tunnelIdentity(tunnelKey(Buffer.from(next, 'base64'))));
  });

  it('an open mesh: the runner by its member address, plain bytes; a stranger claiming its name is refused', async () => {
    const open: MeshMode = { mode: 'open' };
    const lendOpen = await lender(open, lends);
    try {
      const stream = await dial({ mode: open, self: 'runner', member: 'lender', url: lendOpen.url, lendId: 'lend-1', localAddress: RUNNER_IP });
      assert.ok(!(stream instanceof tls.TLSSocket));
      stream.destroy();
      const before = rec.connections();
      const stranger = await rawUpgrade(lendOpen.url, 'lend-1', { 'x-viiwork-node': 'runner' }, STRANGER_IP);
      assert.equal(stranger.status, 401, stranger.body);
      assert.equal(rec.connections(), before);
    } finally {
      lendOpen.server.close();
    }
  });

  it("closing the runner's tunnel ends the connections piped through it", async () => {
    const tunnel = await openTunnel({ mode, self: 'runner', member: 'lender', url: lend.url, lendId: 'lend-1', log });
    const client = net.connect({ host: '127.0.0.1', port: tunnel.port });
    const echoed = await new Promise<string>((resolve) => {
      client.once('data', (d) => resolve(String(d)));
      client.write('ping');
    });
    assert.equal(echoed, 'ping');
    const closed = new Promise<void>((r) => client.once('close', () => r()));
    await tunnel.close();
    await closed;
    await assert.rejects(
      new Promise((resolve, reject) => net.connect({ host: '127.0.0.1', port: tunnel.port }).once('connect', resolve).once('error', reject)),
      /ECONNREFUSED/,
    );
  });
});

describe('a model run through the tunnel on a real ggml-rpc-server answers as on one host', { skip: engine.skip || (!engine.rpcServer && 'no ggml-rpc-server beside llama-server') }, () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'viiwork-tunnel-'));
  const model = writeTinyGguf(path.join(dir, 'tiny.gguf'), { seed: 45 });
  const mode = secured();
  const procs: ChildProcess[] = [];
  const lends = new Map<string, number>();
  let lend: Awaited<ReturnType<typeof lender>>;
  let tunnel: Tunnel;
  let rpcPort: number;

  async function freePort(host: string): Promise<number> {
    const s = net.createServer();
    await new Promise<void>((r) => s.listen(0, host, r));
    const p = (s.address() as net.AddressInfo).port;
    await new Promise<void>((r) => s.close(() => r()));
    return p;
  }

  /** A llama-server on `port`, extra args appended; its log, to read which devices it used. */
  async function llamaServer(port: number, extra: string[]): Promise<{ url: string; log: () => string }> {
    let text = '';
    const p = spawn(engine.binary, ['-m', model, '--host', '127.0.0.1', '--port', String(port), '-c', '256', '-np', '1', '-t', '1', '--cache-ram', '0', '-ngl', '99', ...extra], { stdio: ['ignore', 'pipe', 'pipe'] });
    procs.push(p);
    p.stdout!.on('data', (d) => (text += d));
    p.stderr!.on('data', (d) => (text += d));
    const url = `http://127.0.0.1:${port}`;
    await waitFor(async () => (await fetch(`${url}/health`).catch(() => undefined))?.status === 200, { timeoutMs: 120_000, what: `llama-server on ${port} (${extra.join(' ')})` });
    return { url, log: () => text };
  }

  async function complete(url: string): Promise<string> {
    const r = await fetch(`${url}/completion`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ prompt: 'The tunnel carries', n_predict: 24, temperature: 0, seed: 7, cache_prompt: false }) });
    assert.equal(r.status, 200);
    return ((await r.json()) as { content: string }).content;
  }

  before(async () => {
    rpcPort = await freePort('127.0.0.1');
    let rpcLog = '';
    const rpc = spawn(engine.rpcServer!, ['-H', '127.0.0.1', '-p', String(rpcPort), '-t', '1'], { stdio: ['ignore', 'pipe', 'pipe'] });
    procs.push(rpc);
    rpc.stdout!.on('data', (d) => (rpcLog += d));
    rpc.stderr!.on('data', (d) => (rpcLog += d));
    await waitFor(() => new Promise<boolean>((r) => net.connect({ host: '127.0.0.1', port: rpcPort }).once('connect', function (this: net.Socket) { this.destroy(); r(true); }).once('error', () => r(false))), { timeoutMs: 30_000, what: 'ggml-rpc-server' });
    lends.set('lend-rpc', rpcPort);
    lend = await lender(mode, lends);
    tunnel = await openTunnel({ mode, self: 'runner', member: 'lender', url: lend.url, lendId: 'lend-rpc', log });
  });
  after(async () => {
    await tunnel?.close();
    lend?.server.close();
    for (const p of procs) p.kill('SIGKILL');
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('greedy output through llama-server --rpc <tunnel> equals the same model on one host, and its layers sat on the RPC device', async () => {
    const alone = await llamaServer(await freePort('127.0.0.1'), []);
    const expected = await complete(alone.url);
    const split = await llamaServer(await freePort('127.0.0.1'), ['--rpc', `127.0.0.1:${tunnel.port}`, '-lv', '4']);
    assert.equal(await complete(split.url), expected);
    assert.match(split.log(), new RegExp(`RPC\\d*\\[127\\.0\\.0\\.1:${tunnel.port}\\]`), 'llama-server placed tensors on the tunnelled RPC device');
  });

  it('ggml-rpc-server bound to 127.0.0.1 is not reachable on any other address', async () => {
    await assert.rejects(
      new Promise((resolve, reject) => net.connect({ host: LENDER_IP, port: rpcPort }).once('connect', resolve).once('error', reject)),
      /ECONNREFUSED/,
    );
  });
});
