/**
 * mDNS discovery between network namespaces this test creates and deletes
 * itself (root only): nothing is ever sent on a real interface.
 *
 *   A (10.213.0.1/24) ──veth── B (10.213.0.2/24)
 *   A (10.213.1.1/24) ──veth── C (10.213.1.2/24)
 *
 * A announces on its link to B only; C sits on A's other link and must
 * neither hear A nor be heard by it.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import { defaultRouteAddress, interfaceOf, sameSubnet } from '../../src/mesh/discovery/mdns.ts';
import { Namespaces } from '../helpers/netns.ts';
import { scriptArgs } from '../helpers/script.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
const script = path.join(here, 'fixtures', 'mdns-node.ts');

describe('mdns helpers', () => {
  test('defaultRouteAddress picks the lowest-metric default route and its IPv4', () => {
    const table = [
      'Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT',
      'wlan0\t00000000\t0100A8C0\t0003\t0\t0\t600\t00000000\t0\t0\t0',
      'eth0\t00000000\t0101A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0',
      'eth0\t0001A8C0\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0',
      'down0\t00000000\t0101A8C0\t0002\t0\t0\t1\t00000000\t0\t0\t0',
    ].join('\n');
    const v4 = (address: string, internal = false) => ({ address, netmask: '255.255.255.0', family: 'IPv4' as const, mac: '', internal, cidr: `${address}/24` });
    const v6 = { address: 'fe80::1', netmask: 'ffff:ffff:ffff:ffff::', family: 'IPv6' as const, mac: '', internal: false, cidr: 'fe80::1/64', scopeid: 2 };
    const interfaces = { lo: [v4('127.0.0.1', true)], eth0: [v6, v4('192.168.1.20')], wlan0: [v4('192.168.0.30')], down0: [v4('10.9.9.9')] };
    assert.equal(defaultRouteAddress({ routeTable: table, interfaces }), '192.168.1.20');
    assert.equal(defaultRouteAddress({ routeTable: table.split('\n').slice(0, 1).join('\n'), interfaces }), undefined);
    assert.equal(defaultRouteAddress({ routeTable: table, interfaces: { wlan0: [v4('192.168.0.30')] } }), undefined);
    assert.deepEqual(interfaceOf('192.168.0.30', interfaces), { name: 'wlan0', cidr: 24, netmask: '255.255.255.0' });
    assert.equal(interfaceOf('1.1.1.1', interfaces), undefined);
  });

  test('sameSubnet', () => {
    assert.equal(sameSubnet('10.1.2.3', '10.1.2.200', 24), true);
    assert.equal(sameSubnet('10.1.3.3', '10.1.2.200', 24), false);
    assert.equal(sameSubnet('10.1.3.3', '10.1.2.200', 16), true);
    assert.equal(sameSubnet('10.1.2.3', '10.1.2.3', 32), true);
    assert.equal(sameSubnet('::1', '10.1.2.3', 8), false);
  });
});

interface Line {
  event: string;
  [k: string]: unknown;
}

class Announcer {
  lines: Line[] = [];
  exited = false;
  readonly child: ChildProcess;
  stderr = '';

  constructor(ns: string, name: string, advertise: string, port: number) {
    this.child = spawn('ip', ['netns', 'exec', ns, process.execPath, ...scriptArgs(script), name, advertise, String(port)], {
      cwd: root,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    readline.createInterface({ input: this.child.stdout! }).on('line', (l) => {
      try {
        this.lines.push(JSON.parse(l) as Line);
      } catch {
        this.lines.push({ event: 'raw', text: l });
      }
    });
    this.child.stderr!.on('data', (d) => (this.stderr += String(d)));
    this.child.on('exit', () => (this.exited = true));
  }

  peers(): string[] {
    return this.lines.filter((l) => l.event === 'peer').map((l) => `${l.name}@${l.gossip}`);
  }

  async waitFor(pred: (l: Line) => boolean, what: string, ms = 15_000): Promise<Line> {
    const deadline = Date.now() + ms;
    for (;;) {
      const hit = this.lines.find(pred);
      if (hit) return hit;
      if (this.exited || Date.now() > deadline) {
        throw new Error(`timed out waiting for ${what}; output: ${JSON.stringify(this.lines)} stderr: ${this.stderr}`);
      }
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  async stop(): Promise<void> {
    if (this.exited) return;
    const done = new Promise<void>((r) => this.child.once('exit', () => r()));
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 5000);
    await done;
    clearTimeout(timer);
  }
}


describe('mdns discovery between network namespaces', () => {
  const id = String(process.pid % 100_000);
  const ns = { a: `vwtestA${id}`, b: `vwtestB${id}`, c: `vwtestC${id}` };
  let skip: string | undefined;
  const spaces: { current?: Namespaces } = {};
  const announcers: Announcer[] = [];
  before(() => {
    // A announces on its link to B only; C sits on A's other link.
    spaces.current = new Namespaces(Object.values(ns), [
      { a: [ns.a, `vwab${id}`, '10.213.0.1/24'], b: [ns.b, `vwba${id}`, '10.213.0.2/24'], multicast: ['a', 'b'] },
      { a: [ns.a, `vwac${id}`, '10.213.1.1/24'], b: [ns.c, `vwca${id}`, '10.213.1.2/24'], multicast: ['b'] },
    ]);
    skip = spaces.current.skip;
  });

  after(async () => {
    await Promise.all(announcers.map((a) => a.stop()));
    spaces.current?.delete();
  });

  test('two nodes find each other by TXT, only on the advertise interface, and a goodbye removes a peer', async (t) => {
    if (skip) {
      t.skip(skip);
      return;
    }
    const a = new Announcer(ns.a, 'node-a', '10.213.0.1', 7946);
    const b = new Announcer(ns.b, 'node-b', '10.213.0.2', 7947);
    const c = new Announcer(ns.c, 'node-c', '10.213.1.2', 7948);
    announcers.push(a, b, c);
    await Promise.all([a, b, c].map((x) => x.waitFor((l) => l.event === 'ready', 'ready')));

    const heardB = await a.waitFor((l) => l.event === 'peer', 'A to hear B');
    assert.deepEqual({ name: heardB.name, addr: heardB.addr, port: heardB.port }, { name: 'node-b', addr: '10.213.0.2', port: 7947 });
    const heardA = await b.waitFor((l) => l.event === 'peer', 'B to hear A');
    assert.deepEqual({ name: heardA.name, addr: heardA.addr, port: heardA.port }, { name: 'node-a', addr: '10.213.0.1', port: 7946 });

    // Several query rounds (250 ms apart) later: nobody heard itself, and C, on A's other link, is isolated.
    await new Promise((r) => setTimeout(r, 1500));
    assert.deepEqual(a.peers(), ['node-b@10.213.0.2:7947']);
    assert.deepEqual(b.peers(), ['node-a@10.213.0.1:7946']);
    assert.deepEqual(c.peers(), []);

    await b.stop();
    await a.waitFor((l) => l.event === 'log' && /node-b said goodbye/.test(String(l.msg)), 'the goodbye of B');
  });
});
