/**
 * A whole viiwork node (not just its memberlist) against Debian's Serf
 * 0.9.4, which speaks memberlist: they join each other both ways, viiwork
 * lists the agent as a foreign member and never polls or routes to it, a
 * different key never joins, kill -9 and `serf leave` are seen as such.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import { after, describe, it } from 'node:test';
import { waitFor } from '../fakes/wait.ts';
import { getJson, startMeshNode, stopAll, type MeshNode } from '../helpers/mesh.ts';

const hasSerf = spawnSync('serf', ['version']).status === 0;
const KEY = crypto.randomBytes(32).toString('base64');
const children: ChildProcess[] = [];

function startSerf(name: string, ip: string, key: string, join?: string): ChildProcess {
  const p = spawn('serf', ['agent', '-node', name, '-bind', `${ip}:7946`, '-rpc-addr', `${ip}:7373`, '-encrypt', key, ...(join ? ['-join', join] : [])], { stdio: 'ignore' });
  children.push(p);
  return p;
}

function serfStatus(ip: string, member: string): string | undefined {
  const r = spawnSync('serf', ['members', '-rpc-addr', `${ip}:7373`, '-format', 'json'], { timeout: 5000 });
  if (r.status !== 0) return undefined;
  try {
    return (JSON.parse(r.stdout.toString()) as { members: { name: string; status: string }[] }).members.find((m) => m.name === member)?.status;
  } catch {
    return undefined;
  }
}

async function viewOf(node: MeshNode, member: string): Promise<{ state: string; role: string } | undefined> {
  const mesh = await getJson<{ members: { name: string; state: string; role: string }[] }>(`${node.url}/v1/mesh`);
  return mesh.members.find((m) => m.name === member);
}

describe('a viiwork node and a Serf agent', { skip: hasSerf ? false : 'serf is not installed (apt-get install serf)' }, () => {
  const nodes: MeshNode[] = [];
  after(async () => {
    await stopAll(nodes);
    for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
  });

  it('viiwork joins Serf: each lists the other alive, the agent as foreign; kill -9 of the node shows it failed in Serf', async () => {
    startSerf('agent1', '127.0.0.41', KEY);
    await waitFor(() => serfStatus('127.0.0.41', 'agent1') === 'alive', { timeoutMs: 15_000, what: 'serf up' });
    const node = await startMeshNode({ name: 'vw1', ip: '127.0.0.42', env: { VIIWORK_MESH_SECRET: KEY }, seeds: ['127.0.0.41:7946'], mesh: { label: '' } });
    nodes.push(node);
    await waitFor(() => serfStatus('127.0.0.41', 'vw1') === 'alive', { timeoutMs: 10_000, what: 'serf lists vw1 alive' });
    await waitFor(async () => (await viewOf(node, 'agent1'))?.state === 'alive', { timeoutMs: 10_000, what: 'vw1 lists agent1 alive' });
    assert.equal((await viewOf(node, 'agent1'))?.role, 'foreign');
    const fleet = await getJson(`${node.url}/v1/fleet/capacity`);
    assert.deepEqual(fleet.models, [], 'a foreign member is never polled');
    node.proc.kill('SIGKILL');
    await waitFor(() => serfStatus('127.0.0.41', 'vw1') === 'failed', { timeoutMs: 40_000, what: 'serf shows vw1 failed' });
  });

  it('Serf joins viiwork: alive both ways; `serf leave` shows left; a killed agent shows dead; another key never joins', async () => {
    const node = await startMeshNode({ name: 'vw2', ip: '127.0.0.43', env: { VIIWORK_MESH_SECRET: KEY }, mesh: { label: '' } });
    nodes.push(node);
    const agent = startSerf('agent2', '127.0.0.44', KEY, '127.0.0.43:7946');
    await waitFor(async () => (await viewOf(node, 'agent2'))?.state === 'alive', { timeoutMs: 15_000, what: 'vw2 lists agent2 alive' });
    await waitFor(() => serfStatus('127.0.0.44', 'vw2') === 'alive', { timeoutMs: 10_000, what: 'agent2 lists vw2 alive' });
    startSerf('stranger', '127.0.0.45', crypto.randomBytes(32).toString('base64'));
    spawnSync('serf', ['leave', '-rpc-addr', '127.0.0.44:7373'], { timeout: 10_000 });
    await waitFor(async () => (await viewOf(node, 'agent2'))?.state === 'left', { timeoutMs: 15_000, what: 'vw2 shows agent2 left' });
    void agent;
    const doomed = startSerf('agent3', '127.0.0.46', KEY, '127.0.0.43:7946');
    await waitFor(async () => (await viewOf(node, 'agent3'))?.state === 'alive', { timeoutMs: 15_000, what: 'vw2 lists agent3 alive' });
    doomed.kill('SIGKILL');
    await waitFor(async () => (await viewOf(node, 'agent3'))?.state === 'dead', { timeoutMs: 30_000, what: 'vw2 shows the killed agent3 dead' });
    assert.equal(await viewOf(node, 'stranger'), undefined);
    await waitFor(() => serfStatus('127.0.0.45', 'stranger') === 'alive', { timeoutMs: 10_000, what: 'stranger up' });
    const join = spawnSync('serf', ['join', '-rpc-addr', '127.0.0.45:7373', '127.0.0.43:7946'], { timeout: 15_000 });
    assert.notEqual(join.status, 0, 'serf join with another key must fail');
    assert.equal(serfStatus('127.0.0.45', 'vw2'), undefined);
    assert.equal(await viewOf(node, 'stranger'), undefined);
  });
});
