/**
 * Issue 3 at the level of whole nodes (real `viiwork serve` processes):
 * secured meshes, the neither/both refusal, SIGSTOP → suspect → dead →
 * refuted, a real partition with nftables healed by the rejoin loop, the
 * tailnet feeder against a fake tailscaled, and mDNS between network
 * namespaces.
 */
import assert from 'node:assert/strict';
import { execFile, execFileSync, spawn } from 'node:child_process';
import crypto from 'node:crypto';
import dgram from 'node:dgram';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { request } from 'undici';
import { stringify } from 'yaml';
import { waitFor } from '../fakes/wait.ts';
import { getJson, startMeshNode, stopAll, waitConverged, type MeshNode } from '../helpers/mesh.ts';
import { Namespaces } from '../helpers/netns.ts';
import { tempDir } from '../helpers/node.ts';
import { VERSION } from '../../src/version.ts';

const run = promisify(execFile);
const BIN = path.resolve('bin/viiwork.js');
const isRoot = process.platform === 'linux' && process.getuid?.() === 0;
const sim = { ttft_ms: 1, prefill_ms_per_1k: 1, tokens_per_s: 2000, output_tokens: 1 };

async function stateOf(viewer: MeshNode, name: string): Promise<string | undefined> {
  const mesh = await getJson<{ members: { name: string; state: string }[] }>(`${viewer.url}/v1/mesh`);
  return mesh.members.find((m) => m.name === name)?.state;
}

describe('a secured mesh of three nodes', () => {
  const secret = crypto.randomBytes(32).toString('base64');
  const env = { VIIWORK_MESH_SECRET: secret };
  const nodes: MeshNode[] = [];
  let intruder: MeshNode | undefined;
  before(async () => {
    for (let i = 1; i <= 3; i++) {
      nodes.push(await startMeshNode({ name: `n${i}`, ip: `127.0.0.${i}`, env, seeds: i > 1 ? ['127.0.0.1:7946'] : [], models: [{ name: 'm', engine: 'sim', parallel: 1, sim }] }));
    }
  });
  after(() => stopAll([...nodes, intruder]));

  it('lists every node alive on every node within 10 s', async () => {
    await waitConverged(nodes, 10_000);
    const mesh = await getJson(`${nodes[0].url}/v1/mesh`);
    assert.equal(mesh.mode, 'secured');
    for (const m of mesh.members) {
      assert.equal(m.role, 'node');
      assert.match(m.gossip, /^127\.0\.0\.[123]:7946$/);
      assert.match(m.api, /^http:\/\/127\.0\.0\.[123]:8086$/);
      assert.equal(m.version, VERSION);
      assert.ok(!Number.isNaN(Date.parse(m.since)));
    }
  });

  it('never shows a node with another secret, while it keeps trying for 10 s', async () => {
    intruder = await startMeshNode({
      name: 'intruder',
      ip: '127.0.0.4',
      env: { VIIWORK_MESH_SECRET: crypto.randomBytes(32).toString('base64') },
      seeds: ['127.0.0.1:7946', '127.0.0.2:7946'],
      mesh: { rejoin_interval: '1s' },
    });
    const stranger: MeshNode = intruder;
    const all: MeshNode[] = [...nodes, stranger];
    const until = Date.now() + 10_000;
    while (Date.now() < until) {
      for (const n of all) {
        const mesh: { members: { name: string }[] } = await getJson(`${n.url}/v1/mesh`);
        const names: string[] = mesh.members.map((m) => m.name);
        if (n === stranger) assert.deepEqual(names, ['intruder']);
        else assert.ok(!names.includes('intruder'), `${n.name} lists the intruder`);
      }
      await new Promise((r) => setTimeout(r, 250));
    }
    await intruder.stop();
  });

  it('marks a node frozen with SIGSTOP suspect, then dead, and alive again after SIGCONT', async () => {
    const [n1, n2, n3] = nodes;
    n3.proc.kill('SIGSTOP');
    try {
      await waitFor(async () => (await stateOf(n1, 'n3')) === 'suspect' || (await stateOf(n1, 'n3')) === 'dead', { timeoutMs: 30_000, what: 'n3 suspect' });
      await waitFor(async () => (await stateOf(n1, 'n3')) === 'dead' && (await stateOf(n2, 'n3')) === 'dead', { timeoutMs: 30_000, what: 'n3 dead' });
    } finally {
      n3.proc.kill('SIGCONT');
    }
    await waitConverged(nodes, 10_000);
  });
});

describe('nodes in different mesh modes', () => {
  it('log "mesh mode mismatch" and stay out of each other’s mesh', async () => {
    const secured = await startMeshNode({ name: 'sec', ip: '127.0.0.51', env: { VIIWORK_MESH_SECRET: crypto.randomBytes(32).toString('base64') }, seeds: ['127.0.0.52:7946'], mesh: { rejoin_interval: '1s' } });
    const open = await startMeshNode({ name: 'opn', ip: '127.0.0.52', seeds: ['127.0.0.51:7946'], mesh: { rejoin_interval: '1s' } });
    try {
      await waitFor(() => /mesh mode mismatch/.test(secured.logs()) && /mesh mode mismatch/.test(open.logs()), { timeoutMs: 15_000, what: 'both log the mismatch' });
      for (const [n, other] of [[secured, 'opn'], [open, 'sec']] as const) {
        const mesh = await getJson<{ members: { name: string }[] }>(`${n.url}/v1/mesh`);
        assert.ok(!mesh.members.some((m) => m.name === other), `${n.name} lists ${other}`);
      }
    } finally {
      await stopAll([secured, open]);
    }
  });
});

describe('starting without a mesh mode', () => {
  function configFile(doc: Record<string, unknown>): string {
    const file = path.join(tempDir(), 'viiwork.yaml');
    fs.writeFileSync(file, stringify({ node: { name: 'x', state_dir: path.dirname(file) }, api: { host: '127.0.0.1', port: 0 }, ...doc }));
    return file;
  }
  const envWithout = () => {
    const env = { ...process.env };
    delete env.VIIWORK_MESH_SECRET;
    delete env.VIIWORK_MESH_SECRET_PREV;
    return env;
  };

  it('refuses to start with neither a secret nor mesh.open, naming the variable and the key', async () => {
    const file = configFile({ mesh: { network: 'lan', advertise: '127.0.0.1', port: 0, mdns: false } });
    await assert.rejects(run(process.execPath, [BIN, 'serve', '--config', file], { env: envWithout(), timeout: 20_000 }), (e: { code: number; stderr: string }) => {
      assert.notEqual(e.code, 0);
      assert.match(e.stderr, /VIIWORK_MESH_SECRET/);
      assert.match(e.stderr, /mesh\.open/);
      return true;
    });
  });

  it('refuses to start with both', async () => {
    const file = configFile({ mesh: { open: true, network: 'lan', advertise: '127.0.0.1', port: 0, mdns: false } });
    const env = { ...envWithout(), VIIWORK_MESH_SECRET: crypto.randomBytes(32).toString('base64') };
    await assert.rejects(run(process.execPath, [BIN, 'serve', '--config', file], { env, timeout: 20_000 }), (e: { code: number; stderr: string }) => {
      assert.notEqual(e.code, 0);
      assert.match(e.stderr, /VIIWORK_MESH_SECRET/);
      return true;
    });
  });

  it('exits non-zero naming the keys when the gossip or API address is taken', async () => {
    const first = await startMeshNode({ name: 'taken', ip: '127.0.0.8' });
    try {
      const envOpen = envWithout();
      const gossip = configFile({ node: { name: 'second', state_dir: tempDir() }, api: { host: '127.0.0.8', port: 8087 }, mesh: { open: true, network: 'lan', advertise: '127.0.0.8', mdns: false } });
      await assert.rejects(run(process.execPath, [BIN, 'serve', '--config', gossip], { env: envOpen, timeout: 20_000 }), (e: { code: number; stderr: string }) => {
        assert.notEqual(e.code, 0);
        assert.match(e.stderr, /cannot bind gossip to 127\.0\.0\.8:7946 \(mesh\.advertise, mesh\.port\): the address is already in use/);
        return true;
      });
      const api = configFile({ node: { name: 'third', state_dir: tempDir() }, api: { host: '127.0.0.8', port: 8086 }, mesh: { open: true, network: 'lan', advertise: '127.0.0.8', port: 7950, mdns: false } });
      await assert.rejects(run(process.execPath, [BIN, 'serve', '--config', api], { env: envOpen, timeout: 20_000 }), (e: { code: number; stderr: string }) => {
        assert.match(e.stderr, /cannot listen on 127\.0\.0\.8:8086 \(api\.host, api\.port\)/);
        return true;
      });
    } finally {
      await first.stop();
    }
  });

  it('the newcomer with a name already alive in the mesh exits non-zero with a clear message', async () => {
    const first = await startMeshNode({ name: 'twin', ip: '127.0.0.6' });
    try {
      const second = await startMeshNode({ name: 'twin', ip: '127.0.0.7', seeds: ['127.0.0.6:7946'] }, { waitHealthy: false });
      const code = await Promise.race([second.exited, new Promise((r) => setTimeout(() => r('still running'), 20_000))]);
      if (code === 'still running') await second.stop();
      assert.notEqual(code, 0);
      assert.notEqual(code, 'still running');
      assert.match(second.logs(), /another live node is named "twin"/);
    } finally {
      await first.stop();
    }
  });
});

describe('a real partition (nftables)', () => {
  let skip: string | undefined;
  const nodes: MeshNode[] = [];
  const table = `viiwork_test_${process.pid}`;
  const nft = (script: string) => execFileSync('nft', ['-f', '-'], { input: script, stdio: ['pipe', 'ignore', 'pipe'] });
  before(async () => {
    if (!isRoot) skip = 'needs root for nftables';
    else {
      try {
        execFileSync('nft', ['--version'], { stdio: 'ignore' });
      } catch {
        skip = 'nft is not installed (apt-get install nftables)';
      }
    }
    if (skip) return;
    const seeds = ['127.0.0.11:7946', '127.0.0.12:7946', '127.0.0.13:7946'];
    for (let i = 1; i <= 3; i++) {
      nodes.push(await startMeshNode({ name: `p${i}`, ip: `127.0.0.${10 + i}`, seeds, mesh: { rejoin_interval: '2s' }, models: [{ name: `m${i}`, engine: 'sim', parallel: 1, sim }] }));
    }
    await waitConverged(nodes, 15_000);
  });
  after(async () => {
    try {
      execFileSync('nft', ['delete', 'table', 'inet', table], { stdio: 'ignore' });
    } catch {
      // not there
    }
    await stopAll(nodes);
  });

  it('each side marks the other dead; an alias set meanwhile reaches the other side after the rejoin loop heals the mesh', async (t) => {
    if (skip) return t.skip(skip);
    const [p1, p2, p3] = nodes;
    // Cut {.11, .12} from .13 on the gossip and API ports, both ways, tcp and udp.
    nft(`table inet ${table} {
      chain out { type filter hook output priority 0; policy accept;
        ip saddr { 127.0.0.11, 127.0.0.12 } ip daddr 127.0.0.13 meta l4proto { tcp, udp } th dport { 7946, 8086 } drop
        ip saddr 127.0.0.13 ip daddr { 127.0.0.11, 127.0.0.12 } meta l4proto { tcp, udp } th dport { 7946, 8086 } drop
        ip saddr { 127.0.0.11, 127.0.0.12 } ip daddr 127.0.0.13 meta l4proto { tcp, udp } th sport { 7946, 8086 } drop
        ip saddr 127.0.0.13 ip daddr { 127.0.0.11, 127.0.0.12 } meta l4proto { tcp, udp } th sport { 7946, 8086 } drop
      }
    }`);
    try {
      await waitFor(async () => (await stateOf(p1, 'p3')) === 'dead' && (await stateOf(p3, 'p1')) === 'dead' && (await stateOf(p3, 'p2')) === 'dead', {
        timeoutMs: 40_000,
        what: 'both sides mark the other dead',
      });
      const set = await request(`${p1.url}/v1/aliases/during-split`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ target: 'm1', fallbacks: [] }) });
      assert.equal(set.statusCode, 200);
      await set.body.text();
    } finally {
      execFileSync('nft', ['delete', 'table', 'inet', table]);
    }
    await waitConverged(nodes, 2000 + 10_000);
    await waitFor(async () => (await getJson(`${p3.url}/v1/aliases`)).data.some((a: { alias: string }) => a.alias === 'during-split'), { timeoutMs: 10_000, what: 'alias reached p3' });
    void p2;
  });
});

describe('the tailnet feeder with a fake tailscaled', () => {
  let seedNode: MeshNode;
  let tailNode: MeshNode | undefined;
  let server: http.Server;
  let socketPath: string;
  let offlineHits = 0;
  let offTcp: net.Server;
  let offUdp: dgram.Socket;
  before(async () => {
    seedNode = await startMeshNode({ name: 'ts-seed', ip: '127.0.0.21', models: [{ name: 'tm', engine: 'sim', parallel: 1, sim }] });
    // A peer that is offline in the status document: anything reaching it would be counted.
    offTcp = net.createServer((s) => {
      offlineHits++;
      s.destroy();
    });
    await new Promise<void>((r) => offTcp.listen(7946, '127.0.0.29', () => r()));
    offUdp = dgram.createSocket('udp4');
    offUdp.on('message', () => offlineHits++);
    await new Promise<void>((r) => offUdp.bind(7946, '127.0.0.29', () => r()));
    socketPath = path.join(tempDir(), 'tailscaled.sock');
    server = http.createServer((req, res) => {
      if (req.url !== '/localapi/v0/status') return void res.writeHead(404).end();
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          Self: { HostName: 'me', TailscaleIPs: ['127.0.0.22', 'fd7a:115c:a1e0::22'], Online: true },
          Peer: {
            k1: { HostName: 'seed', DNSName: 'seed.ts.net.', TailscaleIPs: ['127.0.0.21'], Online: true },
            k2: { HostName: 'gone', DNSName: 'gone.ts.net.', TailscaleIPs: ['127.0.0.29'], Online: false },
          },
        }),
      );
    });
    await new Promise<void>((r) => server.listen(socketPath, () => r()));
  });
  after(async () => {
    await stopAll([seedNode, tailNode]);
    server.close();
    offTcp.close();
    offUdp.close();
  });

  it('joins the online peers of the status document, advertises its Tailscale IP, and never dials offline ones', async () => {
    tailNode = await startMeshNode({ name: 'ts-node', ip: '127.0.0.22', mesh: { network: 'tailnet', advertise: '', tailnet_socket: socketPath, rejoin_interval: '1s' } });
    await waitConverged([seedNode, tailNode], 10_000);
    const mesh = await getJson(`${seedNode.url}/v1/mesh`);
    assert.equal(mesh.members.find((m: { name: string }) => m.name === 'ts-node').gossip, '127.0.0.22:7946');
    // A few more rejoin rounds: the offline peer is still never dialled.
    await waitFor(() => /gossip on 127\.0\.0\.22:7946 \(tailnet/.test(tailNode!.logs()), { what: 'tailnet mode logged' });
    const rounds = Date.now() + 3000;
    while (Date.now() < rounds) await new Promise((r) => setTimeout(r, 250));
    assert.equal(offlineHits, 0);
  });
});

describe('mDNS between two network namespaces', () => {
  let skip: string | undefined;
  const id = (process.pid % 10000).toString();
  const ns = { a: `vwmA${id}`, b: `vwmB${id}` };
  const procs: ReturnType<typeof spawn>[] = [];
  let spaces: Namespaces | undefined;
  before(() => {
    spaces = new Namespaces(Object.values(ns), [{ a: [ns.a, `vwma${id}`, '10.214.0.1/24'], b: [ns.b, `vwmb${id}`, '10.214.0.2/24'], multicast: ['a', 'b'] }]);
    skip = spaces.skip;
  });
  after(async () => {
    for (const p of procs) p.kill('SIGKILL');
    spaces?.delete();
  });

  it('two nodes with no seeds and tailnet off find each other by mDNS alone', async (t) => {
    if (skip) return t.skip(skip);
    const start = (name: string, n: string, addr: string) => {
      const dir = tempDir();
      const file = path.join(dir, 'viiwork.yaml');
      fs.writeFileSync(
        file,
        stringify({
          node: { name, state_dir: dir },
          api: { host: addr, port: 8086 },
          mesh: { open: true, network: 'lan', advertise: addr, mdns: true, rejoin_interval: '2s' },
          models: [{ name: `${name}-m`, engine: 'sim', parallel: 1, sim }],
        }),
      );
      const p = spawn('ip', ['netns', 'exec', n, process.execPath, BIN, 'serve', '--config', file], { stdio: 'ignore' });
      procs.push(p);
    };
    start('mA', ns.a, '10.214.0.1');
    start('mB', ns.b, '10.214.0.2');
    const members = async (n: string, addr: string) => {
      const { stdout } = await run('ip', ['netns', 'exec', n, process.execPath, BIN, 'status', '--url', `http://${addr}:8086`]);
      return stdout;
    };
    await waitFor(
      async () => {
        const a = await members(ns.a, '10.214.0.1');
        const b = await members(ns.b, '10.214.0.2');
        return /^mB\s+alive/m.test(a) && /^mA\s+alive/m.test(b);
      },
      { timeoutMs: 30_000, intervalMs: 500, what: 'mA and mB alive in each other’s view' },
    );
  });
});
