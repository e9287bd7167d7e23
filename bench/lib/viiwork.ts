/** A real `viiwork serve` process for benchmarks: generated YAML, open mesh on loopback, no mDNS, log to a file. */
import fs from 'node:fs';
import path from 'node:path';
import { request } from 'undici';
import { stringify } from 'yaml';
import { startProc, until, type Proc } from './procs.ts';

/** The viiwork under test: this checkout, or another tree (say a `git archive` of a commit) named by VIIWORK_ROOT. */
export const VIIWORK_ROOT = path.resolve(process.env.VIIWORK_ROOT ?? '.');
const BIN = path.join(VIIWORK_ROOT, 'bin/viiwork.js');

export interface BenchNodeSpec {
  name: string;
  ip: string;
  apiPort: number;
  gossipPort: number;
  models?: Record<string, unknown>[];
  seeds?: string[];
  mesh?: Record<string, unknown>;
  routing?: Record<string, unknown>;
  /** extra node flags, e.g. --cpu-prof */
  nodeArgs?: string[];
  /** a secured mesh with this VIIWORK_MESH_SECRET (base64 of 32 bytes) instead of an open one */
  secret?: string;
  /** extra `node:` keys, e.g. memory_budget */
  node?: Record<string, unknown>;
  /** Run the viiwork of this tree instead of VIIWORK_ROOT's (an older commit measured beside this one). */
  root?: string;
  /** extra `api:` keys, e.g. body_timeout or keys_file (host and port come from ip and apiPort) */
  api?: Record<string, unknown>;
}

export interface BenchNode {
  name: string;
  url: string;
  proc: Proc;
}

/** `opts.check`: run on the written config file before the node starts (say, `viiwork check`); its error stops the start. */
export async function startViiwork(spec: BenchNodeSpec, dir: string, opts: { check?: (file: string) => Promise<void> } = {}): Promise<BenchNode> {
  const nodeDir = path.join(dir, spec.name);
  fs.mkdirSync(nodeDir, { recursive: true });
  const doc = {
    node: { name: spec.name, state_dir: path.join(nodeDir, 'state'), ...(spec.node ?? {}) },
    api: { ...(spec.api ?? {}), host: spec.ip, port: spec.apiPort },
    mesh: { open: spec.secret === undefined, network: 'lan', mdns: false, advertise: spec.ip, port: spec.gossipPort, seeds: spec.seeds ?? [], ...(spec.mesh ?? {}) },
    routing: spec.routing ?? {},
    models: spec.models ?? [],
  };
  const file = path.join(nodeDir, 'viiwork.yaml');
  fs.writeFileSync(file, stringify(doc));
  if (opts.check) await opts.check(file);
  const env = { ...process.env };
  delete env.VIIWORK_MESH_SECRET;
  delete env.VIIWORK_MESH_SECRET_PREV;
  delete env.VIIWORK_DEBUG;
  if (spec.secret !== undefined) env.VIIWORK_MESH_SECRET = spec.secret;
  const bin = spec.root ? path.join(path.resolve(spec.root), 'bin/viiwork.js') : BIN;
  const proc = startProc(`viiwork-${spec.name}`, process.execPath, [...(spec.nodeArgs ?? []), bin, 'serve', '--config', file], { dir, env });
  const url = `http://${spec.ip}:${spec.apiPort}`;
  await until(
    async () => {
      if (proc.child.exitCode !== null) throw new Error(`exited with ${proc.child.exitCode}`);
      const r = await request(`${url}/health`);
      await r.body.text();
      return r.statusCode === 200;
    },
    `viiwork node ${spec.name} healthy`,
    30_000,
  ).catch((err) => {
    throw new Error(`${err.message}\n--- ${spec.name} log ---\n${proc.tail()}`);
  });
  return { name: spec.name, url, proc };
}

export async function getJson<T = any>(url: string): Promise<T> {
  const r = await request(url);
  const text = await r.body.text();
  if (r.statusCode !== 200) throw new Error(`${url}: HTTP ${r.statusCode}`);
  return JSON.parse(text) as T;
}

/**
 * Until `from` lists every node in `hosts` alive and has a fresh capacity
 * report showing `model` with healthy slots on each of them.
 */
export async function waitFleet(from: BenchNode, model: string, hosts: string[], timeoutMs = 30_000): Promise<void> {
  await until(
    async () => {
      const fleet = await getJson<{ models: { name: string; hosts: { node: string; fresh: boolean; slots: number }[] }[] }>(`${from.url}/v1/fleet/capacity`);
      const m = fleet.models.find((x) => x.name === model);
      return !!m && hosts.every((h) => m.hosts.some((x) => x.node === h && x.fresh && x.slots > 0));
    },
    `${model} on ${hosts.join(', ')} fresh in ${from.name}'s /v1/fleet/capacity`,
    timeoutMs,
    100,
  );
}

/** Until every node lists every other as alive. */
export async function waitConverged(nodes: BenchNode[], timeoutMs = 30_000): Promise<void> {
  await until(
    async () => {
      for (const n of nodes) {
        const mesh = await getJson<{ members: { name: string; state: string }[] }>(`${n.url}/v1/mesh`);
        for (const o of nodes) if (!mesh.members.some((m) => m.name === o.name && m.state === 'alive')) return false;
      }
      return true;
    },
    'mesh converged',
    timeoutMs,
    100,
  );
}
