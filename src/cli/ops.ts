/** `viiwork status`, `models`, `secret` and `init`: the operator's views of a node and of the mesh, and the two generators. */
import fs from 'node:fs';
import os from 'node:os';
import type { Command } from 'commander';
import type { HistoryDoc } from '../history/store.ts';
import { CLI_SERIES, historyRows } from './sparkline.ts';
import { stringify } from 'yaml';
import { validateConfig } from '../config/load.ts';
import { newSecret } from '../security/secret.ts';
import { call, DEFAULT_NODE_URL, formatTable, NodeCallError, out, run } from './node-client.ts';

export interface MeshDoc {
  node: string;
  mode: string;
  members: { name: string; state: string; role: string; gossip: string; api: string | null; version: string | null; since: string }[];
}
export interface FleetDoc {
  node?: string;
  at?: number;
  models: { name: string; hosts: FleetHost[] }[];
  memory?: FleetMemory[];
}
/** One member's memory as /v1/fleet/capacity gives it (SPEC section 11). */
export interface FleetMemory {
  node: string;
  budget: number;
  used: number;
  free: number;
  lent?: number;
  lends?: boolean;
  lent_to?: { to: string; model: string; bytes: number }[];
}
export interface FleetHost {
  node: string;
  fresh: boolean;
  report_age_ms: number;
  draining?: boolean;
  slots: number;
  busy: number;
  free: number;
  state?: string;
  has_file?: boolean;
  file?: { size: number; sha256: string };
  fetch?: { bytes: number; size: number };
  /** A model bigger than one host running split there: which member holds which part. */
  split?: { member: string; bytes: number }[];
}

/** The STATE column: the host's lifecycle state, and for a model running split, which member holds which part. */
export function stateColumn(h: FleetHost): string {
  if (h.draining) return 'draining';
  const state = h.state ?? '-';
  return h.split?.length ? `${state}, split: ${h.split.map((p) => `${p.member} ${mib(p.bytes)}`).join(' + ')}` : state;
}

/** Each member's budget, use and what it lends to whom (SPEC section 11). */
export function memoryRows(memory: readonly FleetMemory[]): string[][] {
  return [...memory]
    .sort((a, b) => (a.node < b.node ? -1 : 1))
    .map((m) => [
      m.node,
      mib(m.budget),
      mib(m.used),
      mib(m.free),
      !m.lends ? '-' : m.lent_to?.length ? m.lent_to.map((l) => `${mib(l.bytes)} to ${l.to} (${l.model})`).join(', ') : 'yes, nothing lent now',
    ]);
}

const MiB = 1024 * 1024;
const mib = (n: number): string => `${(n / MiB).toFixed(1)} MiB`;

/** The hosts a fetch of the model's file would come from: those publishing the hash most of them publish (ties: the smallest), by name. */
export function fileSenders(hosts: readonly FleetHost[]): string[] {
  const count = new Map<string, number>();
  for (const h of hosts) if (h.file) count.set(h.file.sha256, (count.get(h.file.sha256) ?? 0) + 1);
  const best = [...count.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))[0]?.[0];
  return hosts.filter((h) => best !== undefined && h.file?.sha256 === best).map((h) => h.node).sort();
}

/**
 * Where a model's file is, for each of its hosts (SPEC section 11): `here`,
 * `fetching` with progress, `fetchable from` the members publishing a file
 * for it (those with the hash most members publish, as a fetch picks), or
 * `missing everywhere`; `-` for an entry without a file (sim, openai).
 */
export function fileColumn(hosts: readonly FleetHost[]): Map<string, string> {
  const senders = fileSenders(hosts);
  const out = new Map<string, string>();
  for (const h of hosts) {
    if (h.has_file === undefined) out.set(h.node, '-');
    else if (h.has_file) out.set(h.node, 'here');
    else if (h.fetch) out.set(h.node, `fetching ${mib(h.fetch.bytes)} of ${mib(h.fetch.size)} (${Math.floor((100 * h.fetch.bytes) / Math.max(1, h.fetch.size))}%)`);
    else if (h.state === 'fetching') out.set(h.node, 'fetching');
    else if (senders.length) out.set(h.node, `fetchable from ${senders.join(', ')}`);
    else out.set(h.node, 'missing everywhere');
  }
  return out;
}

export interface ModelsDoc {
  data: { id: string; owned_by: string; context_length?: number; workloads: string[]; hosts?: string[]; target?: string; fallbacks?: string[] }[];
}

/** What POST /v1/models/{id}/load|unload answers (docs/api.md). */
interface LifecycleDoc {
  model: string;
  node?: string;
  state?: string;
  results?: { node: string; status: number; state?: string; error?: { message?: string } }[];
}

/** What POST /v1/drain answers (docs/api.md). */
interface DrainDoc {
  node: string;
  draining: boolean;
  already: boolean;
  timeout_ms: number;
}

/** Machine-readable output: one JSON document and a newline, for `jq` and scripts. */
const outJson = (doc: unknown): void => void out(`${JSON.stringify(doc, null, 2)}\n`);

/**
 * `viiwork status --json`: the node's /v1/mesh and /v1/fleet/capacity
 * documents as one, every field kept as the node sent it (docs/api.md).
 */
export function statusJson(mesh: MeshDoc, fleet: FleetDoc): { node: string; mode: string; at: number | null; members: MeshDoc['members']; models: FleetDoc['models']; memory: FleetMemory[] } {
  return { node: mesh.node, mode: mesh.mode, at: fleet.at ?? null, members: mesh.members, models: fleet.models, memory: fleet.memory ?? [] };
}

export function registerOpsCommands(program: Command): void {
  program
    .command('status')
    .description('members of the mesh and every model × host with its slots, as this node sees them')
    .option('--url <url>', 'any node', DEFAULT_NODE_URL)
    .option('--json', 'print one JSON document instead of tables (schema: docs/api.md)')
    .action(
      run(async (opts: { url: string; json?: boolean }) => {
        const [mesh, fleet] = await Promise.all([call<MeshDoc>(opts.url, 'GET', '/v1/mesh'), call<FleetDoc>(opts.url, 'GET', '/v1/fleet/capacity')]);
        if (opts.json) {
          outJson(statusJson(mesh, fleet));
          return;
        }
        out(`mesh seen from ${mesh.node} (${mesh.mode})\n\n`);
        out(formatTable([['MEMBER', 'STATE', 'ROLE', 'GOSSIP', 'API', 'VERSION', 'SINCE'], ...mesh.members.map((m) => [m.name, m.state, m.role, m.gossip, m.api ?? '-', m.version ?? '-', m.since])]));
        out('\n');
        const rows = fleet.models.flatMap((m) => {
          const files = fileColumn(m.hosts);
          return m.hosts.map((h) => [m.name, h.node, `${h.busy}/${h.slots}`, String(h.free), h.fresh ? 'fresh' : 'stale', `${(h.report_age_ms / 1000).toFixed(1)}s`, stateColumn(h), files.get(h.node) ?? '-']);
        });
        out(formatTable([['MODEL', 'HOST', 'BUSY/SLOTS', 'FREE', 'REPORT', 'AGE', 'STATE', 'FILE'], ...rows]));
        if (fleet.memory?.length) {
          out('\n');
          out(formatTable([['MEMBER', 'BUDGET', 'USED', 'FREE', 'LENDS'], ...memoryRows(fleet.memory)]));
        }
        // The last 15 minutes (SPEC section 10), from the node's history; a node before 0.3 has none.
        const history = await call<HistoryDoc>(opts.url, 'GET', `/v1/history?series=${CLI_SERIES}&since=-15m`).catch(() => undefined);
        if (history) {
          out('\nlast 15 minutes (each mark 30 s; latest value at the right)\n');
          out(formatTable([['HOST', 'REQUESTS', 'REQ/S', 'TTFT P95', 'MS', 'BUSY SLOTS', 'NOW'], ...historyRows(history, Date.now())]));
        }
      }),
    );

  program
    .command('top')
    .description('a live view of hosts, slots, queues and recent requests, redrawn in place (q or Ctrl-C quits)')
    .option('--url <url>', 'any node', DEFAULT_NODE_URL)
    .option('--interval <seconds>', 'seconds between redraws', '2')
    .action(
      run(async (opts: { url: string; interval: string }) => {
        const { top } = await import('./top.ts');
        await top(opts);
      }),
    );

  program
    .command('models')
    .description('every model and alias in the mesh')
    .option('--url <url>', 'any node', DEFAULT_NODE_URL)
    .option('--json', 'print the /v1/models document as JSON instead of a table (schema: docs/api.md)')
    .action(
      run(async (opts: { url: string; json?: boolean }) => {
        const doc = await call<ModelsDoc>(opts.url, 'GET', '/v1/models');
        if (opts.json) {
          outJson(doc);
          return;
        }
        const rows = doc.data.map((m) => [
          m.id,
          m.owned_by === 'alias' ? `alias → ${[m.target, ...(m.fallbacks ?? [])].join(', ')}` : 'model',
          m.context_length === undefined ? '-' : String(m.context_length),
          m.workloads.join(',') || '-',
          (m.hosts ?? []).join(',') || '-',
        ]);
        out(formatTable([['MODEL', 'KIND', 'CONTEXT', 'WORKLOADS', 'HOSTS'], ...rows]));
      }),
    );

  for (const action of ['load', 'unload'] as const) {
    program
      .command(`${action} <model>`)
      .description(
        action === 'load'
          ? 'load an on-demand model: on --host, else where placement picks (as for a request)'
          : 'unload an idle on-demand model: on --host, else on every host that has it loaded',
      )
      .option('--host <name>', 'the member to do it (default: the mesh decides)')
      .option('--url <url>', 'any node', DEFAULT_NODE_URL)
      .option('--json', 'print the node’s answer as JSON')
      .action(
        run(async (model: string, opts: { host?: string; url: string; json?: boolean }) => {
          const doc = await call<LifecycleDoc>(opts.url, 'POST', `/v1/models/${encodeURIComponent(model)}/${action}?host=${encodeURIComponent(opts.host ?? '*')}`, {
            detail: `viiwork ${action} from the command line`,
          });
          if (opts.json) return outJson(doc);
          if (doc.results) {
            if (doc.results.length === 0) out(`${model} is not loaded anywhere\n`);
            for (const r of doc.results) out(`${model} on ${r.node}: ${r.state ?? r.error?.message ?? r.status}\n`);
            return;
          }
          out(`${model} on ${doc.node}: ${doc.state}\n`);
        }),
      );
  }

  program
    .command('drain')
    .description('drain this machine’s node: it takes no new work, lets what it runs finish (node.drain_timeout), leaves the mesh and exits')
    .option('--url <url>', 'the node to drain (default: the one on this machine)', DEFAULT_NODE_URL)
    .option('--no-wait', 'return once the drain has begun, not when the node has exited')
    .option('--json', 'print the node’s answer as JSON')
    .action(
      run(async (opts: { url: string; wait: boolean; json?: boolean }) => {
        const doc = await call<DrainDoc>(opts.url, 'POST', '/v1/drain');
        if (opts.json) outJson(doc);
        else out(`${doc.node}: ${doc.already ? 'already draining' : 'draining'}; up to ${Math.round(doc.timeout_ms / 1000)}s for its requests, then it leaves the mesh and exits\n`);
        if (!opts.wait) return;
        // The node has gone once its API stops answering (its process exits at the end of the drain).
        const deadline = Date.now() + doc.timeout_ms + 60_000;
        while (Date.now() < deadline) {
          const health = await call<{ status?: string }>(opts.url, 'GET', '/health').catch((err: Error) => err);
          if (health instanceof NodeCallError && health.message.startsWith('cannot reach')) {
            if (!opts.json) out(`${doc.node}: drained and stopped\n`);
            return;
          }
          await new Promise((r) => setTimeout(r, 250));
        }
        throw new Error(`${doc.node} still answers ${Math.round((doc.timeout_ms + 60_000) / 1000)}s after the drain began; look at its log`);
      }),
    );

  program
    .command('secret')
    .description('print a new mesh secret (base64 of 32 random bytes) for VIIWORK_MESH_SECRET')
    .action(() => {
      out(`${newSecret()}\n`);
    });

  program
    .command('init')
    .description('write a checked config file for this machine, with the engines and GGUF files found on it')
    .option('-o, --output <file>', 'where to write it', './viiwork.yaml')
    .option('--name <name>', 'node name', os.hostname().replace(/[^A-Za-z0-9._-]/g, '-').slice(0, 63))
    .option('--open', 'an open mesh (no secret); default is secured by VIIWORK_MESH_SECRET')
    .option('--network <network>', 'tailnet | lan | auto', 'auto')
    .option('--sim', 'add a simulated model so the node answers at once')
    .option('--models <dir>', 'a folder of GGUF files to look in first (also: ~/models, /models, the Hugging Face, LM Studio and llama.cpp caches)')
    .option('--no-discover', 'do not look for engines and GGUF files on this machine')
    .option('--force', 'overwrite an existing file')
    .action(
      run(async (opts: { output: string; name: string; open?: boolean; network: string; sim?: boolean; models?: string; discover?: boolean; force?: boolean }) => {
        if (fs.existsSync(opts.output) && !opts.force) throw new Error(`${opts.output} exists; pass --force to overwrite`);
        const found = opts.discover === false ? undefined : await (await import('./discover.ts')).discover({ modelsDir: opts.models });
        const models = [...(opts.sim ? [{ name: 'demo-sim', engine: 'sim', parallel: 4, workloads: ['chat', 'completion'] }] : []), ...(found?.models ?? [])];
        const doc: Record<string, unknown> = {
          node: { name: opts.name, ...(found ? { memory_budget: 'auto' } : {}) },
          mesh: { open: Boolean(opts.open), network: opts.network },
          models,
        };
        validateConfig(doc); // never write a file the node would refuse
        const header = [
          '# viiwork config, written by `viiwork init`. Every key and its default: docs/configuration.md',
          opts.open ? '# open mesh: any node that reaches port 7946 may join' : '# secured mesh: export VIIWORK_MESH_SECRET=$(viiwork secret) (the same on every machine)',
          '# add models under `models:` (engine: llamacpp | openai | embedded | sim)',
          ...(found ? ['# found on this machine:', ...found.notes.map((n) => `#   ${n}`)] : []),
        ].join('\n');
        fs.writeFileSync(opts.output, `${header}\n${stringify(doc)}`);
        if (found) for (const n of found.notes) out(`${n}\n`);
        out(`wrote ${opts.output} (${models.length} model entr${models.length === 1 ? 'y' : 'ies'}); check it with: viiwork check --config ${opts.output}\n`);
      }),
    );
}
