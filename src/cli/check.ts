/**
 * `viiwork check --config FILE`: every check `serve` runs before it accepts
 * traffic (src/config/preflight.ts), plus whether the ports can be bound.
 * Each finding names its key and the fix. Exit status 1 on any error, 0 when
 * there are only warnings or none.
 */
import type { Command } from 'commander';
import { formatFinding, type Finding } from '../config/load.ts';
import { checkConfigFile } from '../preflight/preflight.ts';
import { resolveConfigPath } from '../config/load.ts';
import { MemoryBudget } from '../lifecycle/budget.ts';
import { memoryFindings } from '../lifecycle/memory.ts';
import { localFleet, withMeshFiles } from './check-files.ts';

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
