/**
 * Alias writes are accepted only from the node's own machine (SPEC section
 * 6): a node in one network namespace, a client in another (root only; the
 * test makes and deletes both namespaces itself).
 */
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { stringify } from 'yaml';
import { waitFor } from '../fakes/wait.ts';
import { Namespaces } from '../helpers/netns.ts';
import { tempDir } from '../helpers/node.ts';

const run = promisify(execFile);
const BIN = path.resolve('bin/viiwork.js');

describe('alias writes from another machine', () => {
  const id = (process.pid % 10000).toString();
  const ns = { node: `vwwN${id}`, client: `vwwC${id}` };
  let spaces: Namespaces | undefined;
  let proc: ReturnType<typeof spawn> | undefined;
  before(() => {
    spaces = new Namespaces(Object.values(ns), [{ a: [ns.node, `vwwn${id}`, '10.215.0.1/24'], b: [ns.client, `vwwc${id}`, '10.215.0.2/24'] }]);
  });
  after(() => {
    proc?.kill('SIGKILL');
    spaces?.delete();
  });

  it('are refused with 403, while reads from there and writes from the node’s own machine work', async (t) => {
    if (spaces?.skip) return t.skip(spaces.skip);
    const dir = tempDir();
    const file = path.join(dir, 'viiwork.yaml');
    fs.writeFileSync(
      file,
      stringify({
        node: { name: 'w', state_dir: dir },
        api: { host: '0.0.0.0', port: 8086 },
        mesh: { open: true, network: 'lan', advertise: '10.215.0.1', mdns: false },
        models: [{ name: 'm', engine: 'sim', parallel: 1 }],
      }),
    );
    proc = spawn('ip', ['netns', 'exec', ns.node, process.execPath, BIN, 'serve', '--config', file], { stdio: 'ignore' });
    // The CLI is the client: from the client's namespace (another machine) and from the node's own.
    const cli = (where: string, ...args: string[]) => run('ip', ['netns', 'exec', where, process.execPath, BIN, ...args]);
    await waitFor(async () => (await cli(ns.client, 'models', '--url', 'http://10.215.0.1:8086')).stdout.includes('m '), { timeoutMs: 20_000, intervalMs: 300, what: 'node up' });
    await assert.rejects(cli(ns.client, 'alias', 'set', 'x', 'm', '--url', 'http://10.215.0.1:8086'), (e: { stderr: string }) => {
      assert.match(e.stderr, /accepted only from this machine/);
      return true;
    });
    const listed = await cli(ns.client, 'alias', 'ls', '--url', 'http://10.215.0.1:8086');
    assert.doesNotMatch(listed.stdout, /^x\s/m);
    await cli(ns.node, 'alias', 'set', 'x', 'm', '--url', 'http://10.215.0.1:8086');
    assert.match((await cli(ns.client, 'alias', 'ls', '--url', 'http://10.215.0.1:8086')).stdout, /^x\s+m\b/m);
  });
});
