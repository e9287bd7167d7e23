/** `viiwork serve`: run this machine's node until SIGINT/SIGTERM; SIGHUP re-validates the config. */
import { ConfigError, loadConfig, resolveConfigPath } from '../config/load.ts';
import { ViiworkNode } from '../node/node.ts';

export async function serve(opts: { config?: string }): Promise<void> {
  const file = resolveConfigPath(opts.config);
  const config = loadConfig(file);
  const node: ViiworkNode = new ViiworkNode(config, {
    onFatal: (message) => {
      node.log.error(`${message}; exiting`);
      void node.stop().finally(() => process.exit(1));
    },
  });
  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    node.log.info(`${signal}: stopping`);
    const force = setTimeout(() => process.exit(1), 40_000);
    force.unref();
    await node.stop();
    process.exit(0);
  };
  // A bug in one request's path must not take the whole node (and every request in flight) down with it.
  process.on('unhandledRejection', (reason) => node.log.error(`unhandled rejection (a bug; please report it): ${(reason as Error)?.stack ?? String(reason)}`));
  process.on('SIGINT', () => void stop('SIGINT'));
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGHUP', () => {
    let next;
    try {
      next = loadConfig(file);
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
  await node.start();
}
