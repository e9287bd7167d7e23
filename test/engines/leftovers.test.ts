/**
 * Issue 9, item 10: a managed llama-server does not outlive its node. Killed
 * with SIGKILL (as the OOM killer does), the node takes its engine with it
 * (setpriv --pdeathsig on Linux); where that is unavailable, the next start
 * of the node kills the engine its earlier run left behind before starting
 * a new one.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { FAKE_LLAMA_SERVER } from '../fakes/fake-engine.ts';
import { waitFor } from '../fakes/wait.ts';
import { startMeshNode, type MeshNode } from '../helpers/mesh.ts';
import { tempDir } from '../helpers/node.ts';

const IP = (n: number) => `127.0.34.${n}`;

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Pids of running processes whose command line names `marker` (the test's own model file). */
function pidsNaming(marker: string): number[] {
  const out: number[] = [];
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      if (fs.readFileSync(`/proc/${d}/cmdline`, 'utf8').split('\0').includes(marker)) out.push(Number(d));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/** The one engine running on `model` (other than `not`), once there is one. */
function enginePid(model: string, not: number[] = []): Promise<number> {
  return waitFor(() => pidsNaming(model).find((p) => !not.includes(p)), { timeoutMs: 20_000, what: `an engine running ${model}` });
}

describe('engines do not outlive their node', () => {
  const dir = tempDir('viiwork-leftovers-');
  const model = path.join(dir, 'm.gguf');
  fs.writeFileSync(model, Buffer.concat([Buffer.from('GGUF'), Buffer.alloc(64)]));
  const spec = (name: string, ip: string, stateDir: string, env: Record<string, string> = {}) => ({
    name,
    ip,
    stateDir,
    env: { FAKE_LOAD_MS: '0', ...env },
    models: [{ name: 'm', engine: 'llamacpp', path: model, parallel: 1, llamacpp: { binary: FAKE_LLAMA_SERVER } }],
  });
  const started: MeshNode[] = [];
  const pids: number[] = [];
  after(async () => {
    for (const n of started) n.proc.kill('SIGKILL');
    for (const p of pids) if (alive(p)) process.kill(p, 'SIGKILL');
  });

  it('an engine dies with a node killed by SIGKILL', async () => {
    const node = await startMeshNode(spec('K', IP(1), path.join(dir, 'state-k')));
    started.push(node);
    const pid = await enginePid(model);
    pids.push(pid);
    assert.ok(alive(pid));
    node.proc.kill('SIGKILL');
    await node.exited;
    await waitFor(() => !alive(pid), { timeoutMs: 10_000, what: `engine pid ${pid} gone after its node's SIGKILL` });
  });

  it('without setpriv, the engine an earlier run left is killed at the next start', async () => {
    // A PATH with node and nothing else: the fake engine's `#!/usr/bin/env node` still runs, setpriv is not found.
    const bin = path.join(dir, 'bin');
    fs.mkdirSync(bin, { recursive: true });
    fs.symlinkSync(process.execPath, path.join(bin, 'node'));
    const stateDir = path.join(dir, 'state-l');
    const first = await startMeshNode(spec('L', IP(2), stateDir, { PATH: bin }));
    started.push(first);
    const orphan = await enginePid(model);
    pids.push(orphan);
    await waitFor(() => /starting → healthy/.test(first.logs()), { timeoutMs: 20_000, what: 'the first engine healthy' });
    first.proc.kill('SIGKILL');
    await first.exited;
    // Nothing ties it to its node now: it keeps running (this is the case the record is for).
    await new Promise((r) => setTimeout(r, 300));
    assert.ok(alive(orphan), 'without setpriv the engine survives its node');

    const second = await startMeshNode(spec('L', IP(2), stateDir, { PATH: bin }));
    started.push(second);
    await waitFor(() => !alive(orphan), { timeoutMs: 10_000, what: `leftover engine pid ${orphan} killed at the next start` });
    const said = new RegExp(`killed \\S+ pid ${orphan} .*left running by an earlier run`);
    await waitFor(() => said.test(second.logs()), { timeoutMs: 10_000, what: `the log line about pid ${orphan}` });
    const fresh = await enginePid(model, [orphan]);
    pids.push(fresh);
    assert.notEqual(fresh, orphan);
    assert.ok(alive(fresh));
    await second.stop();
    await waitFor(() => !alive(fresh), { timeoutMs: 10_000, what: 'engine stopped with its node' });
  });
});
