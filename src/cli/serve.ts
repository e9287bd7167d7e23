/** `viiwork serve`: run this machine's node until SIGINT/SIGTERM; SIGHUP re-validates the config. */
import { ConfigError, loadConfig, resolveConfigPath } from '../config/load.ts';
import { ViiworkNode } from '../node/node.ts';

export async function serve(opts: { config?: string }): Promise<void> {
  const file = resolveConfigPath(opts.config);
  const config = loadConfig(file);
  const node = new ViiworkNode(config);
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
  process.on('SIGINT', () => void stop('SIGINT'));
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGHUP', () => {
    try {
      loadConfig(file);
      node.log.warn(`SIGHUP: ${file} is valid; applying model changes needs a restart in this version`);
    } catch (err) {
      node.log.error(`SIGHUP: ${file} refused, nothing changed:\n${err instanceof ConfigError ? err.message : String(err)}`);
    }
  });
  node.log.info(`viiwork ${node.version} starting as "${node.name}" with ${file}`);
  await node.start();
}
