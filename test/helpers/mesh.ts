/**
 * Real nodes as real processes (`viiwork serve`) on 127.0.x.y, each with
 * the standard ports 8086 and 7946, for multi-process mesh tests. Each test
 * file uses its own 127.0.x block so files can run in parallel.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after } from 'node:test';
import { request } from 'undici';
import { stringify } from 'yaml';
import { waitFor } from '../fakes/wait.ts';
import { tempDir } from './temp-dir.ts';

const BIN = path.resolve('bin/viiwork.js');

/**
 * Every node this file started that has not exited. A test whose setup
 * fails part way (a node that cannot start) may leave others it started
 * unknown to its after(); their pipes would keep the file's process, and
 * with it the whole run, alive. When the file's tests are done, whatever
 * is left is killed. (Only under the test runner: benchmarks import this too.)
 */
const live = new Set<ChildProcess>();
if (process.env.NODE_TEST_CONTEXT) {
  after(() => {
    for (const p of live) p.kill('SIGKILL');
  });
}

export interface MeshNodeSpec {
  name: string;
  ip: string;
  models?: Record<string, unknown>[];
  seeds?: string[];
  routing?: Record<string, unknown>;
  mesh?: Record<string, unknown>;
  aliases?: Record<string, unknown>;
  /** Extra `api` keys (host and port are set by the helper). */
  api?: Record<string, unknown>;
  env?: Record<string, string>;
  stateDir?: string;
  /** Extra `node` keys (name and state_dir are set by the helper), such as memory_budget. */
  node?: Record<string, unknown>;
  /** The `telemetry` section (SPEC section 10). */
  telemetry?: Record<string, unknown>;
}

export interface MeshNode {
  name: string;
  ip: string;
  url: string;
  gossip: string;
  proc: ChildProcess;
  stateDir: string;
  /** The config file it was started with. */
  config: string;
  logs(): string;
  /** Stop with SIGTERM and wait for the exit. */
  stop(): Promise<void>;
  exited: Promise<number | null>;
}

export async function startMeshNode(spec: MeshNodeSpec, opts: { waitHealthy?: boolean } = {}): Promise<MeshNode> {
  const dir = tempDir('viiwork-mesh-');
  const stateDir = spec.stateDir ?? path.join(dir, 'state');
  const secured = spec.env?.VIIWORK_MESH_SECRET !== undefined;
  const doc = {
    node: { ...(spec.node ?? {}), name: spec.name, state_dir: stateDir },
    api: { ...(spec.api ?? {}), host: spec.ip, port: 8086 },
    mesh: {
      open: !secured,
      network: 'lan',
      mdns: false,
      advertise: spec.ip,
      port: 7946,
      seeds: spec.seeds ?? [],
      capacity_poll: '250ms',
      // Every member every poll, as these tests were written for (the product's default polls members it does not route to every 10 s).
      capacity_background: '250ms',
      rejoin_interval: '2s',
      ...(spec.mesh ?? {}),
    },
    routing: spec.routing ?? {},
    models: spec.models ?? [],
    aliases: spec.aliases ?? {},
    ...(spec.telemetry ? { telemetry: spec.telemetry } : {}),
  };
  const file = path.join(dir, 'viiwork.yaml');
  fs.writeFileSync(file, stringify(doc));
  const env = { ...process.env, ...(spec.env ?? {}) };
  if (!secured) delete env.VIIWORK_MESH_SECRET;
  const proc = spawn(process.execPath, [BIN, 'serve', '--config', file], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout!.on('data', (d) => (out += d));
  proc.stderr!.on('data', (d) => {
    out += d;
    if (process.env.TEST_LOGS) process.stderr.write(d);
  });
  live.add(proc);
  const exited = new Promise<number | null>((resolve) =>
    proc.once('exit', (code) => {
      live.delete(proc);
      resolve(code);
    }),
  );
  const node: MeshNode = {
    name: spec.name,
    ip: spec.ip,
    url: `http://${spec.ip}:8086`,
    gossip: `${spec.ip}:7946`,
    proc,
    stateDir,
    config: file,
    logs: () => out,
    exited,
    async stop() {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      proc.kill('SIGCONT');
      proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(timer);
    },
  };
  if (opts.waitHealthy !== false) {
    let gone = false;
    // A node that exits (a taken address, a refused config) fails at once, not at the deadline.
    const died = exited.then((code) => {
      gone = true;
      throw new Error(`node ${spec.name} exited with ${code} before it was healthy`);
    });
    await Promise.race([
      died,
      waitFor(
        async () => {
          if (gone) return true;
          const r = await request(`${node.url}/health`);
          await r.body.text();
          return r.statusCode === 200;
        },
        { timeoutMs: 60_000, what: `node ${spec.name} healthy` },
      ),
    ])
      .then(() => {
        if (gone) throw new Error(`node ${spec.name} exited before it was healthy`);
      })
      .catch((err) => {
        proc.kill('SIGKILL');
        throw new Error(`${(err as Error).message}\n--- ${spec.name} log ---\n${out}`);
      });
    died.catch(() => {});
  }
  return node;
}

export async function getJson<T = any>(url: string): Promise<T> {
  const r = await request(url);
  const text = await r.body.text();
  return JSON.parse(text) as T;
}

/** Wait until every node lists every other as alive. */
export async function waitConverged(nodes: MeshNode[], timeoutMs = 15_000): Promise<void> {
  await waitFor(
    async () => {
      for (const n of nodes) {
        const mesh = await getJson<{ members: { name: string; state: string }[] }>(`${n.url}/v1/mesh`);
        for (const other of nodes) if (!mesh.members.some((m) => m.name === other.name && m.state === 'alive')) return false;
      }
      return true;
    },
    { timeoutMs, what: 'mesh converged' },
  );
}

/** Wait until `node` has a fresh report listing `model` with healthy slots from every host in `hosts`. */
export async function waitModelOn(node: MeshNode, model: string, hosts: string[], timeoutMs = 15_000): Promise<void> {
  await waitFor(
    async () => {
      const fleet = await getJson<{ models: { name: string; hosts: { node: string; fresh: boolean; slots: number }[] }[] }>(`${node.url}/v1/fleet/capacity`);
      const m = fleet.models.find((x) => x.name === model);
      return !!m && hosts.every((h) => m.hosts.some((x) => x.node === h && x.fresh && x.slots > 0));
    },
    { timeoutMs, what: `${model} on ${hosts.join(',')} seen from ${node.name}` },
  );
}

/**
 * Starts the first node, then the others together, each seeded to the
 * first, pushing them into `into` in the order given (every one that came
 * up, so a test's after() stops them even when another failed), then waits
 * for them to converge.
 */
export async function startSeeded(into: MeshNode[], specs: Omit<MeshNodeSpec, 'seeds'>[]): Promise<void> {
  if (!specs.length) return;
  const first = await startMeshNode({ ...specs[0], seeds: into.length ? [into[0].gossip] : [] });
  into.push(first);
  const seeds = [into[0].gossip];
  const rest = await Promise.allSettled(specs.slice(1).map((spec) => startMeshNode({ ...spec, seeds })));
  for (const r of rest) if (r.status === 'fulfilled') into.push(r.value);
  const failed = rest.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) throw failed.reason;
  await waitConverged(into);
}

/** Waits until `node`'s fleet view shows `host` publishing a file for `model` (of `size` bytes, when given). */
export async function waitSeesFile(node: MeshNode, model: string, host: string, size?: number, timeoutMs = 20_000): Promise<void> {
  await waitFor(
    async () =>
      (await getJson(`${node.url}/v1/fleet/capacity`)).models
        .find((m: any) => m.name === model)
        ?.hosts.some((h: any) => h.node === host && h.has_file === true && (size === undefined || h.file?.size === size)),
    { timeoutMs, what: `${node.name} sees ${host}'s file for ${model}` },
  );
}

export async function stopAll(nodes: (MeshNode | undefined)[]): Promise<void> {
  await Promise.all(nodes.filter((n): n is MeshNode => !!n).map((n) => n.stop()));
}

/** POST a JSON body; the status, headers and body text come back. */
export function postJson(url: string, body: unknown, headers: Record<string, string> = {}) {
  return request(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) }).then(async (r) => ({
    status: r.statusCode,
    headers: r.headers,
    text: await r.body.text(),
  }));
}

/**
 * A gateway `gw` (no models) and a host `h` serving the sim model `m` (`parallel` slots, `sim` settings) at
 * `ip(1)` and `ip(2)`, converged, with `m` on h seen at gw: the set-up of the tests that price a host's slots from an
 * entry without engines. Both go into `into` (for stopAll).
 */
export async function startGatewayAndSimHost(into: MeshNode[], ip: (n: number) => string, sim: Record<string, unknown>, parallel = 2): Promise<[MeshNode, MeshNode]> {
  const gw = await startMeshNode({ name: 'gw', ip: ip(1) });
  into.push(gw);
  const h = await startMeshNode({ name: 'h', ip: ip(2), seeds: [gw.gossip], models: [{ name: 'm', engine: 'sim', parallel, sim }] });
  into.push(h);
  await waitConverged(into);
  await waitModelOn(gw, 'm', ['h']);
  return [gw, h];
}
