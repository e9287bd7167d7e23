/**
 * Issue 45: the lend API on a real node (a real process), asked by a member
 * (a real memberlist member at its own address, in an open mesh, as the
 * files and slot-cache paths are). A node with `lend_memory: true` lends
 * what its free budget holds: it starts the real ggml-rpc-server on
 * loopback, reserves the bytes (its report shows them and to whom), and
 * frees them on release or when the lease is not renewed. A node without
 * `lend_memory` never lends; a client that is no member gets 403.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import { after, before, describe, it } from 'node:test';
import { startFakePeer, type FakePeer } from '../fakes/fake-peer.ts';
import { waitFor } from '../fakes/wait.ts';
import { realLlamaServer } from '../helpers/engine.ts';
import { rpcChildren } from '../helpers/procs.ts';
import { getJson, startMeshNode, waitConverged, type MeshNode } from '../helpers/mesh.ts';

const { rpcServer, skip } = realLlamaServer();
const IP = (n: number) => `127.0.227.${n}`;
const MIB = 1024 * 1024;

/** A POST from `from` (the member's address), claiming to be member `name` when given. */
function post(url: string, body: unknown, o: { from?: string; name?: string } = {}): Promise<{ status: number; doc: any; headers: http.IncomingHttpHeaders }> {
  return new Promise((resolve, reject) => {
    const data = Buffer.from(JSON.stringify(body));
    const req = http.request(url, { method: 'POST', localAddress: o.from, headers: { 'content-type': 'application/json', 'content-length': data.length, ...(o.name ? { 'x-viiwork-node': o.name } : {}) } }, (res) => {
      let text = '';
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, doc: text ? JSON.parse(text) : undefined, headers: res.headers }));
    });
    req.on('error', reject);
    req.end(data);
  });
}


describe('the lend API of a model bigger than one host', { skip: skip || (!rpcServer && 'no ggml-rpc-server beside llama-server') }, () => {
  const nodes: MeshNode[] = [];
  let peer: FakePeer;
  before(async () => {
    nodes.push(await startMeshNode({ name: 'lender', ip: IP(1), node: { memory_budget: '64MiB', lend_memory: true, rpc_server: rpcServer } }));
    nodes.push(await startMeshNode({ name: 'keeper', ip: IP(2), seeds: [nodes[0].gossip], node: { memory_budget: '64MiB', rpc_server: rpcServer } }));
    await waitConverged(nodes);
    peer = await startFakePeer({ name: 'runner', ip: IP(3), seed: nodes[0].gossip, models: [] });
    await waitFor(async () => (await getJson(`${nodes[0].url}/v1/mesh`)).members.some((m: any) => m.name === 'runner' && m.state === 'alive'), { timeoutMs: 15_000, what: 'the runner a member' });
  });
  after(async () => {
    await peer?.close();
    await Promise.all(nodes.map((n) => n.stop()));
  });

  it('lends what the free budget holds: an rpc-server on loopback, the bytes reserved and shown with whom, freed on release', async () => {
    const [lender] = nodes;
    const r = await post(`${lender.url}/v1/split/lend`, { model: 'big', bytes: 40 * MIB }, { from: IP(3), name: 'runner' });
    assert.equal(r.status, 200, JSON.stringify(r.doc));
    assert.match(r.doc.lend_id, /^[A-Za-z0-9_-]+$/);
    assert.equal(r.doc.bytes, 40 * MIB);
    assert.ok(r.doc.lease_ms > 0);
    assert.equal(r.doc.port, undefined, 'the port is never told: only the tunnel reaches it');
    const kids = rpcChildren(lender.proc.pid!);
    // setpriv execs the server, so it is the node's own child.
    assert.equal(kids.length, 1, 'one ggml-rpc-server runs for the lend');
    const listens = fs.readFileSync('/proc/net/tcp', 'utf8').split('\n').filter((l) => / 0A /.test(l));
    // Local address 0100007F = 127.0.0.1: its listening socket is on loopback 127.0.0.1 only.
    const cmd = fs.readFileSync(`/proc/${kids[0]}/cmdline`, 'utf8').split('\0');
    assert.equal(cmd[cmd.indexOf('-H') + 1], '127.0.0.1');
    const port = Number(cmd[cmd.indexOf('-p') + 1]);
    assert.ok(listens.some((l) => l.includes(`0100007F:${port.toString(16).toUpperCase().padStart(4, '0')}`)), 'it listens on 127.0.0.1');

    const cap = await getJson(`${lender.url}/v1/capacity`);
    assert.equal(cap.memory.lent, 40 * MIB);
    assert.equal(cap.memory.used, 40 * MIB);
    assert.equal(cap.memory.free, 24 * MIB);
    assert.deepEqual(cap.lending, { lent: 40 * MIB, lends: [{ to: 'runner', model: 'big', bytes: 40 * MIB }] });
    const metrics = await (await fetch(`${lender.url}/metrics`)).text();
    assert.match(metrics, new RegExp(`viiwork_memory_bytes\\{kind="lent"\\} ${40 * MIB}\\b`));

    // More than is left free: refused, marked, the figures named.
    const more = await post(`${lender.url}/v1/split/lend`, { model: 'big', bytes: 30 * MIB }, { from: IP(3), name: 'runner' });
    assert.equal(more.status, 503);
    assert.equal(more.headers['x-viiwork-refused'], 'memory');
    assert.equal(more.doc.error.code, 'insufficient_memory');

    // Renewing works for its member only; release frees the bytes and stops the process.
    assert.equal((await post(`${lender.url}/v1/split/renew`, { lend_id: r.doc.lend_id }, { from: IP(3), name: 'runner' })).status, 200);
    const rel = await post(`${lender.url}/v1/split/release`, { lend_id: r.doc.lend_id }, { from: IP(3), name: 'runner' });
    assert.deepEqual([rel.status, rel.doc.released], [200, true]);
    const after = await getJson(`${lender.url}/v1/capacity`);
    assert.equal(after.memory.used, 0);
    assert.deepEqual(after.lending, { lent: 0, lends: [] });
    await waitFor(() => rpcChildren(lender.proc.pid!).length === 0, { timeoutMs: 10_000, what: 'the rpc-server stopped' });
    assert.equal((await post(`${lender.url}/v1/split/renew`, { lend_id: r.doc.lend_id }, { from: IP(3), name: 'runner' })).status, 404);
  });

  it('a lend whose lease is not renewed ends: the memory comes back', async () => {
    const [lender] = nodes;
    const r = await post(`${lender.url}/v1/split/lend`, { model: 'big', bytes: 10 * MIB }, { from: IP(3), name: 'runner' });
    assert.equal(r.status, 200, JSON.stringify(r.doc));
    assert.equal((await getJson(`${lender.url}/v1/capacity`)).memory.lent, 10 * MIB);
    await waitFor(async () => (await getJson(`${lender.url}/v1/capacity`)).memory.used === 0, { timeoutMs: 30_000, intervalMs: 250, what: 'the lease ran out' });
    await waitFor(() => rpcChildren(lender.proc.pid!).length === 0, { timeoutMs: 10_000, what: 'its rpc-server stopped' });
    assert.match(lender.logs(), /stopped renewing its lease/);
  });

  it('a node without lend_memory never lends, and says how to turn it on', async () => {
    const keeper = nodes[1];
    const r = await post(`${keeper.url}/v1/split/lend`, { model: 'big', bytes: MIB }, { from: IP(3), name: 'runner' });
    assert.equal(r.status, 403);
    assert.equal(r.doc.error.code, 'lend_memory_off');
    assert.match(r.doc.error.message, /node\.lend_memory: true/);
    assert.equal(rpcChildren(keeper.proc.pid!).length, 0);
    assert.equal((await getJson(`${keeper.url}/v1/capacity`)).lending, undefined, 'its report says it does not lend');
  });

  it('a client that is no member gets 403; a bad body gets 400 naming the field', async () => {
    const [lender] = nodes;
    const c = await post(`${lender.url}/v1/split/lend`, { model: 'big', bytes: MIB });
    assert.equal(c.status, 403);
    const forged = await post(`${lender.url}/v1/split/lend`, { model: 'big', bytes: MIB }, { name: 'runner' });
    assert.equal(forged.status, 401, 'a member name from another address is refused');
    const bad = await post(`${lender.url}/v1/split/lend`, { model: 'big', bytes: -1 }, { from: IP(3), name: 'runner' });
    assert.equal(bad.status, 400);
    assert.match(bad.doc.error.message, /"bytes"/);
    assert.equal(rpcChildren(lender.proc.pid!).length, 0);
  });
});
