/**
 * `viiwork serve`: run this machine's node. SIGTERM (and `viiwork drain`) drains it first (SPEC section 13): no new
 * work, what it holds finishes within node.drain_timeout, then it leaves the mesh and exits. SIGINT, or a second
 * signal during a drain, stops it at once. SIGHUP re-validates the config.
 */
import { ConfigError, formatFinding, resolveConfigPath } from '../config/load.ts';
import { loadCheckedConfig } from '../preflight/preflight.ts';
import { ViiworkNode } from '../node/node.ts';

export async function serve(opts: { config?: string }): Promise<void> {
  const file = resolveConfigPath(opts.config);
  // Every check `viiwork check` runs (ports aside: the bind below names them); any error refuses to start.
  const { config, warnings } = loadCheckedConfig(file, { env: process.env });
  const node: ViiworkNode = new ViiworkNode(config, {
    onFatal: (message) => {
      node.log.error(`${message}; exiting`);
      void node.stop().finally(() => process.exit(1));
    },
    onDrained: () => process.exit(0),
  });
  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    node.log.info(node.draining ? `${signal} while draining: stopping now` : `${signal}: stopping`);
    const force = setTimeout(() => process.exit(1), 40_000);
    force.unref();
    await node.stop();
    process.exit(0);
  };
  const drain = (signal: string) => {
    if (node.draining || stopping || node.phase !== 'running') return void stop(signal);
    // Past the drain's own bound, the stop's: a hung engine must not keep the process for ever.
    const force = setTimeout(() => process.exit(1), config.node.drain_timeout + 40_000);
    force.unref();
    void node.drain(signal);
  };
  // A bug in one request's path must not take the whole node (and every request in flight) down with it.
  process.on('unhandledRejection', (reason) => node.log.error(`unhandled rejection (a bug; please report it): ${(reason as Error)?.stack ?? String(reason)}`));
  process.on('SIGINT', () => void stop('SIGINT'));
  process.on('SIGTERM', () => drain('SIGTERM'));
  process.on('SIGHUP', () => {
    let next;
    try {
      next = loadCheckedConfig(file, { env: process.env }).config;
    } catch (err) {
      node.log.error(`SIGHUP: ${file} refused, nothing changed:\n${err instanceof ConfigError ? err.message : String(err)}`);
      return;
    }
    node
      .reload(next)
      .then((r) => {
        node.log.info(`SIGHUP: ${file} applied: ${r.added} backend(s) started, ${r.removed} stopped`);
        if (r.restartNeeded.length) node.log.warn(`SIGHUP: changes to ${r.restartNeeded.join(', ')} take effect after a restart`);
      })
      .catch((err) => node.log.error(`SIGHUP: applying ${file} failed: ${(err as Error).message}`));
  });
  node.log.info(`viiwork ${node.version} starting as "${node.name}" with ${file}`);
  for (const w of warnings) node.log.warn(`config: ${formatFinding(w)} (fix: ${w.fix})`);
  await node.start();
}
