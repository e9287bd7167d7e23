/**
 * `viiwork check --config FILE`: every check `serve` runs before it accepts
 * traffic (src/config/preflight.ts), plus whether the ports can be bound.
 * Each finding names its key and the fix. Exit status 1 on any error, 0 when
 * there are only warnings or none.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import { request } from 'undici';
import { formatFinding, resolveConfigPath, type Finding } from '../config/load.ts';
import type { Config } from '../config/schema.ts';
import { checkConfigFile } from '../preflight/preflight.ts';
import { MemoryBudget } from '../lifecycle/budget.ts';
import { memoryFindings } from '../lifecycle/memory.ts';
import { fetchedPath } from '../files/paths.ts';
import { keyHeader } from './node-client.ts';
import { fileSenders, type FleetDoc } from './ops.ts';

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

/** Findings as the operator reads them: level, key and message, then the fix. */
export function formatFindings(findings: Finding[]): string {
  return findings.map((f) => `${f.level === 'error' ? 'error  ' : 'warning'} ${formatFinding(f)}\n        fix: ${f.fix}\n`).join('');
}

export async function check(opts: { config?: string; json?: boolean; ports?: boolean }): Promise<number> {
  const file = resolveConfigPath(opts.config);
  const result = await checkConfigFile(file, { env: process.env, ports: opts.ports });
  if (result.config) {
    // The lifecycle keys (SPEC section 11): every entry against this node's budget, read as serve would.
    const budget = new MemoryBudget(result.config.node.memory_budget);
    await budget.refresh();
    result.findings.push(...(await memoryFindings(result.config, budget.bytes, budget.source)));
    // Files not here (SPEC section 11): a node running on this config's address says who has them.
    const fleet = await localFleet(result.config);
    if (fleet) result.findings = withMeshFiles(result.config, result.findings, fleet);
  }
  const errors = result.findings.filter((f) => f.level === 'error').length;
  const warnings = result.findings.length - errors;
  if (opts.json) {
    process.stdout.write(`${JSON.stringify({ file, ok: errors === 0, errors, warnings, findings: result.findings }, null, 2)}\n`);
    return errors ? 1 : 0;
  }
  if (result.findings.length) process.stderr.write(formatFindings(result.findings));
  if (errors) {
    process.stderr.write(`${file}: ${plural(errors, 'error')}${warnings ? `, ${plural(warnings, 'warning')}` : ''}; serve would refuse this file\n`);
    return 1;
  }
  const c = result.config!;
  process.stdout.write(
    `${file}: ok (node "${c.node.name}", ${c.models.length} model entr${c.models.length === 1 ? 'y' : 'ies'}${warnings ? `, ${plural(warnings, 'warning')}` : ''})\n`,
  );
  return 0;
}

export function registerCheckCommand(program: Command): void {
  program
    .command('check')
    .description('run every check serve runs before it starts (schema, paths, binaries, secret, keys, ports) without starting')
    .option('-c, --config <file>', 'config file (default ./viiwork.yaml, then /etc/viiwork/viiwork.yaml)')
    .option('--json', 'print the findings as JSON')
    .option('--no-ports', 'skip probing whether the API and gossip ports can be bound')
    .action(async (opts: { config?: string; json?: boolean; ports?: boolean }) => {
      process.exitCode = await check(opts);
    });
}

/*
 * `viiwork check` on model files that are not on this machine (SPEC section
 * 11): when a node answers on this config's API address, say which members
 * a fetch would come from, or that no member has the file. Offline the
 * preflight's own words stand (the file is fetched from a member if one has it).
 */

/** The entries a fetch would serve: a file entry, its `path` and its models_dir copy both absent here, fetch: mesh. */
function fetchedEntries(config: Config, cwd: string): { index: number; name: string }[] {
  return config.models.flatMap((m, index) => {
    if (!('path' in m) || m.fetch !== 'mesh') return [];
    if (fs.existsSync(path.resolve(cwd, m.path)) || fs.existsSync(fetchedPath(config.node.models_dir, m.path))) return [];
    return [{ index, name: m.name }];
  });
}

/**
 * The findings with each such entry's `path` finding told where its file
 * is in the mesh `fleet` (the node's /v1/fleet/capacity). Pure.
 */
export function withMeshFiles(config: Config, findings: readonly Finding[], fleet: FleetDoc, cwd = process.cwd()): Finding[] {
  const out = findings.map((f) => ({ ...f }));
  for (const e of fetchedEntries(config, cwd)) {
    const key = `models[${e.index}].path`;
    const hosts = fleet.models.find((m) => m.name === e.name)?.hosts ?? [];
    const from = fileSenders(hosts).join(', ');
    const at = out.find((f) => f.key === key);
    // An error (the entry is not on_demand, so it is never fetched) stands as the preflight wrote it.
    if (at?.level === 'error') continue;
    const p = (config.models[e.index] as { path: string }).path;
    if (from) {
      const message = `${p} is not on this machine: fetchable from ${from} (as node ${fleet.node ?? 'here'} sees the mesh); it is fetched before it loads`;
      if (at) at.message = message;
      else out.push({ level: 'warning', key, message, fix: 'nothing to do' });
    } else {
      const message = `${p} is not on this machine and no member of the mesh publishes a file for ${e.name} (missing everywhere, as node ${fleet.node ?? 'here'} sees it): a load fails until one has it`;
      const fix = 'download the model once to any member (or to this path)';
      if (at) Object.assign(at, { message, fix });
      else out.push({ level: 'warning', key, message, fix });
    }
  }
  return out;
}

/** The fleet document of a node running on this config's API address, or undefined (not running, not answering in time). */
export async function localFleet(config: Config): Promise<FleetDoc | undefined> {
  const wild = ['', '0.0.0.0', '::', '[::]'].includes(config.api.host);
  const host = wild ? '127.0.0.1' : config.api.host.includes(':') && !config.api.host.startsWith('[') ? `[${config.api.host}]` : config.api.host;
  if (!config.api.port) return undefined;
  try {
    const res = await request(`http://${host}:${config.api.port}/v1/fleet/capacity`, {
      headers: keyHeader(),
      headersTimeout: 2000,
      bodyTimeout: 2000,
    });
    if (res.statusCode !== 200) {
      await res.body.dump();
      return undefined;
    }
    const doc = (await res.body.json()) as FleetDoc;
    return Array.isArray(doc?.models) ? doc : undefined;
  } catch {
    return undefined;
  }
}
