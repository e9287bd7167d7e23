/**
 * Issue 12, items 2 and 6 against Go memberlist itself: a plain Go
 * application (tools/memberlist-go-peer, memberlist.DefaultLANConfig(),
 * Debian's golang-github-hashicorp-memberlist-dev 0.2.2) built here when Go
 * is installed.
 */
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Memberlist, MemberlistConfig } from '../../src/mesh/memberlist/memberlist.ts';
import { encodeAlive } from '../../src/mesh/memberlist/codec/messages.ts';
import { encodePacket } from '../../src/mesh/memberlist/codec/wire.ts';
import { waitFor, followChild } from './helpers.ts';
import { rawUdp, sendUdp } from './hostile.ts';

const SRC = fileURLToPath(new URL('../../tools/memberlist-go-peer', import.meta.url));
const GOCODE = '/usr/share/gocode/src/github.com/hashicorp/memberlist';
const haveGo = spawnSync('sh', ['-c', 'command -v go']).stdout?.toString().trim();
const skip = !haveGo
  ? 'go is not installed (apt-get install golang-go golang-github-hashicorp-memberlist-dev)'
  : !existsSync(GOCODE)
    ? `${GOCODE} is missing (apt-get install golang-github-hashicorp-memberlist-dev)`
    : false;

/** Builds tools/memberlist-go-peer offline (GOPATH mode over /usr/share/gocode), cached by source hash. */
function buildGoPeer(): string {
  const hash = createHash('sha256').update(readFileSync(path.join(SRC, 'main.go'))).digest('hex').slice(0, 16);
  const dir = path.join(tmpdir(), 'viiwork-memberlist-go-peer', hash);
  const bin = path.join(dir, 'go-peer');
  if (existsSync(bin)) return bin;
  mkdirSync(dir, { recursive: true });
  const r = spawnSync('go', ['build', '-o', bin, '.'], {
    cwd: SRC,
    env: { ...process.env, GO111MODULE: 'off', GOPATH: '/usr/share/gocode', GOFLAGS: '', GOCACHE: path.join(tmpdir(), 'viiwork-go-cache') },
    timeout: 240_000,
  });
  if (r.status !== 0) throw new Error(`go build failed: ${r.stderr}`);
  return bin;
}

class GoPeer {
  readonly proc: ChildProcess;
  readonly lines: Record<string, any>[] = [];
  stderr = '';
  ready = false;
  constructor(bin: string, name: string, ip: string, join = '') {
    this.proc = spawn(bin, ['-name', name, '-bind', ip, '-port', '7946', ...(join ? ['-join', join] : [])], { stdio: ['pipe', 'pipe', 'pipe'] });
    followChild(this.proc, this);
    peers.push(this);
  }
  get running(): boolean {
    return this.proc.exitCode === null && this.proc.signalCode === null;
  }
  async members(): Promise<{ name: string; vsn: number[] }[]> {
    const before = this.lines.length;
    this.proc.stdin!.write('members\n');
    await waitFor(() => this.lines.slice(before).some((l) => 'members' in l) || !this.running, 5000, 'go members reply', 20);
    return this.lines.slice(before).find((l) => 'members' in l)?.members ?? [];
  }
  joined(name: string): boolean {
    return this.lines.some((l) => l.event === 'join' && l.member?.name === name);
  }
  joinResult(): { joined: number; error?: string } | undefined {
    return this.lines.find((l) => 'joinResult' in l)?.joinResult;
  }
}

const peers: GoPeer[] = [];
const made: Memberlist[] = [];
let bin = '';
before(() => {
  if (!skip) bin = buildGoPeer();
});
after(async () => {
  for (const p of peers) if (p.running) p.proc.kill('SIGKILL');
  await Promise.all(made.map((m) => m.shutdown()));
});

const PLAIN_APP = { min: 0, max: 0, cur: 0 };
async function ours(name: string, ip: string, cfg: Partial<MemberlistConfig> = {}): Promise<Memberlist> {
  const ml = await Memberlist.create({ name, bindAddr: ip, port: 7946, label: '', delegateProtocol: PLAIN_APP, ...cfg });
  made.push(ml);
  return ml;
}
const alive = (m: Memberlist) => m.members().filter((x) => x.state === 'alive').map((x) => x.name).sort();

test('a DefaultLANConfig Go node and our library (delegate range 0/0/0) join each other, both ways', { skip, timeout: 120_000 }, async () => {
  const a = await ours('ts-a', '127.0.18.1');
  // Go joins us
  const g = new GoPeer(bin, 'go-1', '127.0.18.2', '127.0.18.1:7946');
  await waitFor(() => g.ready || !g.running, 20_000, 'go peer up');
  assert.equal(g.joinResult()?.joined, 1, JSON.stringify(g.joinResult()) + g.stderr);
  await waitFor(() => alive(a).join() === 'go-1,ts-a', 10_000, 'we list the Go node alive');
  assert.deepEqual(a.members().find((m) => m.name === 'go-1')!.vsn, [1, 5, 2, 0, 0, 0]);
  // we join Go
  const b = await ours('ts-b', '127.0.18.3');
  const r = await b.join(['127.0.18.2:7946']);
  assert.equal(r.joined, 1, r.errors.join('; '));
  await waitFor(() => alive(b).join() === 'go-1,ts-a,ts-b', 10_000, 'the newcomer lists everyone');
  await waitFor(async () => (await g.members()).map((m) => m.name).sort().join() === 'go-1,ts-a,ts-b', 10_000, 'Go lists both of ours');
  const seen = (await g.members()).find((m) => m.name === 'ts-b')!;
  assert.deepEqual(seen.vsn, [1, 5, 2, 0, 0, 0]);

  // Serf's range (our default) and a plain Go application do not mix: memberlist refuses the push-pull
  const serfish = await ours('ts-serfish', '127.0.18.4', { delegateProtocol: undefined });
  const r2 = await serfish.join(['127.0.18.2:7946']);
  assert.equal(r2.joined, 0);
  assert.match(r2.errors.join(), /delegate protocol version/);
});

test('a short-Vsn alive sent to us never reaches the Go peer (Go 0.2.2 would panic); a sound one does', { skip, timeout: 60_000 }, async () => {
  const a = made.find((m) => m.localMember().name === 'ts-a')!;
  const g = peers[0];
  assert.ok(g?.running, 'the Go peer from the previous test is up');
  const attacker = await rawUdp('127.0.18.9');
  const send = (node: string, addr: string, vsn: number[]) =>
    sendUdp(
      attacker,
      encodePacket(encodeAlive({ incarnation: 1, node, addr: Buffer.from(addr.split('.').map(Number)), port: 7946, meta: null, vsn }), {
        compress: false,
        crc: false,
        label: '',
        keyring: null,
      }),
      '127.0.18.1',
      7946,
    );
  for (const len of [1, 2, 3, 4, 5]) await send(`evil-${len}`, '127.0.18.50', [1, 5, 2, 0, 0].slice(0, len));
  await send('sound', '127.0.18.51', [1, 5, 2, 0, 0, 0]);
  // the sound one is gossiped on to Go: the short ones had the same chance
  await waitFor(() => g.joined('sound') || !g.running, 15_000, 'Go hears of the sound node through us');
  attacker.close();
  assert.ok(g.running, `the Go peer is still running:\n${g.stderr.slice(-2000)}`);
  assert.doesNotMatch(g.stderr, /panic/);
  assert.deepEqual(g.lines.filter((l) => l.event === 'join' && /^evil/.test(l.member?.name)), []);
  assert.deepEqual(a.members().filter((m) => m.name.startsWith('evil')), []);
  assert.equal(a.stats().entriesRefused, 5);
});
