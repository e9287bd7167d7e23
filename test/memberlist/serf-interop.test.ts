/**
 * Interop with a real HashiCorp Serf 0.9.4 agent (Go memberlist 0.2.x):
 * our Memberlist (in a child process so it can be SIGKILLed) and serf
 * agents on 127.0.2.x:7946, encrypted with a shared 32-byte key, no label
 * (Serf 0.9.4 predates labels).
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { scriptArgs } from '../helpers/script.ts';
import { waitFor, followChild } from './helpers.ts';

const serfPath = spawnSync('sh', ['-c', 'command -v serf']).stdout?.toString().trim();
const skip = serfPath ? false : 'serf is not installed (apt-get install serf)';

const children = new Set<ChildProcess>();
after(() => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

const KEY = randomBytes(32).toString('base64');
const OTHER_KEY = randomBytes(32).toString('base64');

function startSerf(name: string, ip: string, key: string, extra: string[] = []): ChildProcess {
  const p = spawn(
    'serf',
    ['agent', '-node', name, '-bind', `${ip}:7946`, '-rpc-addr', `${ip}:7373`, ...(key ? ['-encrypt', key] : []), '-log-level=debug', ...extra],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const log: string[] = [];
  p.stdout!.on('data', (d) => log.push(String(d)));
  p.stderr!.on('data', (d) => log.push(String(d)));
  (p as ChildProcess & { log: string[] }).log = log;
  children.add(p);
  return p;
}

interface SerfMember {
  name: string;
  addr: string;
  status: string;
}

function serfMembers(ip: string): SerfMember[] {
  const r = spawnSync('serf', ['members', '-rpc-addr', `${ip}:7373`, '-format', 'json'], { timeout: 5000 });
  if (r.status !== 0) return [];
  try {
    return (JSON.parse(r.stdout.toString()) as { members: SerfMember[] }).members;
  } catch {
    return [];
  }
}

const serfStatus = (ip: string, name: string) => serfMembers(ip).find((m) => m.name === name)?.status;

async function waitSerfUp(ip: string): Promise<void> {
  await waitFor(() => serfMembers(ip).length > 0, 15_000, `serf agent on ${ip} answering RPC`, 200);
}

class Ours {
  readonly proc: ChildProcess;
  readonly lines: Record<string, unknown>[] = [];
  ready = false;
  stderr = '';
  constructor(name: string, ip: string, key: string, join = '') {
    const script = fileURLToPath(new URL('./child-node.ts', import.meta.url));
    this.proc = spawn(process.execPath, [...scriptArgs(script), name, ip, '7946', '', key, join], {
      stdio: ['pipe', 'pipe', 'pipe'],
      cwd: fileURLToPath(new URL('../..', import.meta.url)),
    });
    children.add(this.proc);
    followChild(this.proc, this);
  }
  async members(): Promise<{ name: string; state: string }[]> {
    const before = this.lines.length;
    this.proc.stdin!.write('members\n');
    await waitFor(() => this.lines.slice(before).some((l) => 'members' in l), 5000, 'members reply', 20);
    const l = this.lines.slice(before).find((x) => 'members' in x)!;
    return l.members as { name: string; state: string }[];
  }
  async state(name: string): Promise<string | undefined> {
    return (await this.members()).find((m) => m.name === name)?.state;
  }
  joinResult(): { joined: number; errors: string[] } | undefined {
    return this.lines.find((l) => 'joinResult' in l)?.joinResult as { joined: number; errors: string[] } | undefined;
  }
}

test('our memberlist and serf agents join each other, detect failures and leaves', { skip, timeout: 120_000 }, async () => {
  const s1 = startSerf('serf-1', '127.0.2.1', KEY);
  const s2 = startSerf('serf-2', '127.0.2.3', KEY);
  await waitSerfUp('127.0.2.1');
  await waitSerfUp('127.0.2.3');

  // we join serf
  const ours = new Ours('viiwork-1', '127.0.2.2', KEY, '127.0.2.1:7946');
  await waitFor(() => ours.ready, 20_000, 'our node started and joined');
  assert.equal(ours.joinResult()?.joined, 1, JSON.stringify(ours.joinResult()));
  await waitFor(async () => serfStatus('127.0.2.1', 'viiwork-1') === 'alive', 10_000, 'serf-1 lists us alive');
  await waitFor(async () => (await ours.state('serf-1')) === 'alive', 10_000, 'we list serf-1 alive');

  // serf joins us (serf join), and a third agent with -join pointing at us
  const j = spawnSync('serf', ['join', '-rpc-addr', '127.0.2.3:7373', '127.0.2.2:7946'], { timeout: 10_000 });
  assert.equal(j.status, 0, String(j.stdout) + String(j.stderr));
  const s3 = startSerf('serf-3', '127.0.2.4', KEY, ['-join', '127.0.2.2:7946']);
  await waitSerfUp('127.0.2.4');
  await waitFor(
    async () => {
      const m = await ours.members();
      return ['serf-1', 'serf-2', 'serf-3'].every((n) => m.find((x) => x.name === n)?.state === 'alive');
    },
    10_000,
    'we list all three serf agents alive',
  );
  for (const ip of ['127.0.2.1', '127.0.2.3', '127.0.2.4']) {
    await waitFor(async () => serfStatus(ip, 'viiwork-1') === 'alive', 10_000, `serf at ${ip} lists us alive`);
  }

  // serf leave → we show left
  const l = spawnSync('serf', ['leave', '-rpc-addr', '127.0.2.3:7373'], { timeout: 15_000 });
  assert.equal(l.status, 0, String(l.stderr));
  await waitFor(async () => (await ours.state('serf-2')) === 'left', 10_000, 'we show serf-2 left');

  // serf agent killed → we mark it dead
  s3.kill('SIGKILL');
  await waitFor(async () => (await ours.state('serf-3')) === 'dead', 20_000, 'we mark serf-3 dead');

  // we are killed → serf shows us failed
  ours.proc.kill('SIGKILL');
  await waitFor(async () => serfStatus('127.0.2.1', 'viiwork-1') === 'failed', 45_000, 'serf-1 shows us failed (suspicion grows with cluster size: up to ~15 s)');
  s1.kill('SIGKILL');
  s2.kill('SIGKILL');
});

test('a node with a different key never joins serf, in either direction', { skip, timeout: 60_000 }, async () => {
  startSerf('serf-k', '127.0.2.5', KEY);
  await waitSerfUp('127.0.2.5');
  const ours = new Ours('viiwork-k', '127.0.2.6', OTHER_KEY, '127.0.2.5:7946');
  await waitFor(() => ours.ready, 20_000, 'our node started');
  assert.equal(ours.joinResult()?.joined, 0);
  const j = spawnSync('serf', ['join', '-rpc-addr', '127.0.2.5:7373', '127.0.2.6:7946'], { timeout: 15_000 });
  assert.notEqual(j.status, 0, 'serf join to a node with another key fails');
  await new Promise((r) => setTimeout(r, 2000));
  assert.equal(serfStatus('127.0.2.5', 'viiwork-k'), undefined);
  assert.equal(await ours.state('serf-k'), undefined);
  ours.proc.kill('SIGKILL');
});

test('an open (plaintext) node and a serf agent without -encrypt join each other', { skip, timeout: 60_000 }, async () => {
  const s = startSerf('serf-open', '127.0.2.7', '');
  await waitSerfUp('127.0.2.7');
  const ours = new Ours('viiwork-open', '127.0.2.8', '');
  await waitFor(() => ours.ready, 20_000, 'our node started');
  const j = spawnSync('serf', ['join', '-rpc-addr', '127.0.2.7:7373', '127.0.2.8:7946'], { timeout: 10_000 });
  assert.equal(j.status, 0, String(j.stdout) + String(j.stderr));
  await waitFor(async () => serfStatus('127.0.2.7', 'viiwork-open') === 'alive', 10_000, 'serf lists us alive');
  await waitFor(async () => (await ours.state('serf-open')) === 'alive', 10_000, 'we list serf alive');
  ours.proc.kill('SIGKILL');
  s.kill('SIGKILL');
});
