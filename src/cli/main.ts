/** The viiwork command line. */
import { Command } from 'commander';
import { ConfigError } from '../config/load.ts';
import { VERSION } from '../version.ts';

const program = new Command();
program.name('viiwork').description('One OpenAI-compatible endpoint for a whole fleet of LLM machines').version(VERSION);

program
  .command('serve')
  .description('run this machine’s node')
  .option('-c, --config <file>', 'config file (default ./viiwork.yaml, then /etc/viiwork/viiwork.yaml)')
  .action(async (opts) => {
    const { serve } = await import('./serve.ts');
    await serve(opts);
  });

// viiwork check: everything serve checks before it starts
(await import('./check.ts')).registerCheckCommand(program);

program
  .command('demo')
  .description('start a local mesh of three simulated nodes on 127.0.0.1–3 and show routing at work')
  .option('--port <port>', 'API port of each node', '8086')
  .option('--requests <n>', 'requests sent through each entry node', '4')
  .option('--net <prefix>', 'first three octets of the loopback addresses', '127.0.0')
  .option('--once', 'exit after showing the routing table')
  .option('--quiet', 'hide the nodes’ logs')
  .action(async (opts) => {
    const { demo } = await import('./demo.ts');
    await demo(opts);
  });

// viiwork status | models | secret | init
(await import('./ops.ts')).registerOpsCommands(program);

// viiwork alias set|ls|rm|history|revert
(await import('./alias.ts')).registerAliasCommand(program);

// viiwork keys add|ls|rm|set, viiwork usage
const keys = await import('./keys.ts');
keys.registerKeysCommand(program);
keys.registerUsageCommand(program);

program.parseAsync(process.argv).catch((err) => {
  if (err instanceof ConfigError) {
    const lines = err.findings.map((f, i) => `  ${err.problems[i] ?? `${f.key}: ${f.message}`}${f.key === '(file)' ? '' : `\n    fix: ${f.fix}`}`);
    process.stderr.write(`viiwork: invalid configuration:\n${lines.join('\n')}\n`);
  } else {
    process.stderr.write(`viiwork: ${(err as Error).message ?? err}\n`);
  }
  process.exit(2);
});
