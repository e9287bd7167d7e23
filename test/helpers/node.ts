/** Start a real node in this process, on an ephemeral port, with its state in a temp dir. */
import { Writable } from 'node:stream';
import { validateConfig } from '../../src/config/load.ts';
import { createLog } from '../../src/log.ts';
import { ViiworkNode, type NodeOptions } from '../../src/node/node.ts';
import { tempDir } from './temp-dir.ts';

export interface TestNode {
  node: ViiworkNode;
  url: string;
  stateDir: string;
  logs: string[];
  stop(): Promise<void>;
}

export { tempDir };

/** A config document (as it would come from YAML) with test-friendly defaults filled in. */
export function testConfigDoc(doc: Record<string, any>, stateDir: string): Record<string, any> {
  return {
    ...doc,
    node: { name: 'n1', state_dir: stateDir, ...(doc.node ?? {}) },
    api: { host: '127.0.0.1', port: 0, ...(doc.api ?? {}) },
    mesh: { open: true, network: 'lan', mdns: false, advertise: '127.0.0.1', port: 0, ...(doc.mesh ?? {}) },
  };
}

export async function startNode(doc: Record<string, any>, opts: { stateDir?: string; node?: Omit<NodeOptions, 'log'> } = {}): Promise<TestNode> {
  const stateDir = opts.stateDir ?? tempDir();
  const config = validateConfig(testConfigDoc(doc, stateDir));
  const logs: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      logs.push(String(chunk));
      if (process.env.TEST_LOGS) process.stderr.write(chunk);
      cb();
    },
  });
  const node = new ViiworkNode(config, { ...opts.node, log: createLog(config.node.name, { destination: sink }) });
  await node.start();
  return { node, url: node.apiUrl, stateDir, logs, stop: () => node.stop() };
}
