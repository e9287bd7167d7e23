/** `viiwork load|unload MODEL [--host NAME]` against two real nodes (SPEC section 11). */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { rendezvousRank } from '../../src/hashing/rendezvous.ts';
import { placementKey } from '../../src/route/placement.ts';
import { waitFor } from '../fakes/wait.ts';
import { startNode, type TestNode } from '../helpers/node.ts';

const run = promisify(execFile);
const BIN = path.resolve('bin/viiwork.js');
const IP = (n: number) => `127.0.112.${n}`;
const model = { name: 'od', engine: 'sim', parallel: 1, load: 'on_demand', memory: '1GiB', idle_unload: '0', sim: { load_ms: 200 } };

async function stateOn(t: TestNode, m = 'od'): Promise<string> {
  const cap = (await (await fetch(`${t.url}/v1/capacity`)).json()) as any;
  return cap.models.find((x: any) => x.name === m).targets[0].state;
}

describe('viiwork load and unload', () => {
  const nodes: TestNode[] = [];
  before(async () => {
    for (const n of [1, 2]) {
      const mesh = { advertise: IP(n), port: 7946, capacity_poll: '250ms', seeds: n === 1 ? [] : [`${IP(1)}:7946`] };
      nodes.push(await startNode({ node: { name: `cli${n}`, memory_budget: '2GiB' }, api: { host: IP(n) }, mesh, models: [model, { ...model, name: 'od2' }] }));
    }
    await waitFor(async () => ((await (await fetch(`${nodes[0].url}/v1/fleet/capacity`)).json()) as any).models.find((m: any) => m.name === 'od')?.hosts.length === 2, {
      timeoutMs: 15_000,
      intervalMs: 100,
      what: 'both hosts known',
    });
  });
  after(async () => {
    for (const n of nodes) await n.stop();
  });

  it('load with no host loads where placement picks; --host names the member; unload with no host unloads everywhere', async () => {
    const first = rendezvousRank(placementKey('od'), ['cli1', 'cli2'])[0];
    const other = first === 'cli1' ? 'cli2' : 'cli1';
    const { stdout } = await run(process.execPath, [BIN, 'load', 'od', '--url', nodes[0].url]);
    assert.equal(stdout, `od on ${first}: loading\n`);
    const byName = (n: string) => nodes.find((t) => t.node.name === n)!;
    await waitFor(async () => (await stateOn(byName(first))) === 'loaded', { timeoutMs: 10_000, intervalMs: 50 });
    const second = await run(process.execPath, [BIN, 'load', 'od', '--host', other, '--url', nodes[0].url]);
    assert.equal(second.stdout, `od on ${other}: loading\n`);
    await waitFor(async () => (await stateOn(byName(other))) === 'loaded', { timeoutMs: 10_000, intervalMs: 50 });
    // Wait until the entry node's reports show both loaded, then unload everywhere.
    await waitFor(async () => ((await (await fetch(`${nodes[0].url}/v1/fleet/capacity`)).json()) as any).models.find((m: any) => m.name === 'od').hosts.every((h: any) => h.slots > 0), {
      timeoutMs: 10_000,
      intervalMs: 50,
    });
    const un = await run(process.execPath, [BIN, 'unload', 'od', '--url', nodes[0].url]);
    assert.deepEqual(un.stdout.trim().split('\n').sort(), [`od on cli1: unloading`, `od on cli2: unloading`]);
    for (const t of nodes) await waitFor(async () => (await stateOn(t)) === 'unloaded', { timeoutMs: 10_000, intervalMs: 50 });
  });

  it('a request pinned to a host (?host=) loads the model there, not where placement would', async () => {
    const first = rendezvousRank(placementKey('od2'), ['cli1', 'cli2'])[0];
    const other = first === 'cli1' ? 'cli2' : 'cli1';
    const r = await fetch(`${nodes[0].url}/v1/chat/completions?host=${other}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'od2', messages: [{ role: 'user', content: 'hi' }] }),
    });
    assert.equal(r.status, 200, await r.text());
    assert.equal(r.headers.get('x-viiwork-node'), other);
    assert.equal(await stateOn(nodes.find((t) => t.node.name === first)!, 'od2'), 'unloaded');
  });

  it('a member that does not exist, or a model that cannot be unloaded, is an error that says so', async () => {
    await assert.rejects(run(process.execPath, [BIN, 'load', 'od', '--host', 'nosuch', '--url', nodes[0].url]), (err: any) => /no member named "nosuch"/.test(err.stderr) && err.code === 1);
    await assert.rejects(run(process.execPath, [BIN, 'load', 'nope', '--host', 'cli2', '--url', nodes[0].url]), (err: any) => /nope/.test(err.stderr));
  });
});
