/**
 * Ctrl-C ends `viiwork demo` and everything it started within a second: the
 * demo in its own process group, interrupted once it serves, leaves no process
 * in that group (children and not-yet-reaped zombies included).
 *
 * The first case runs the demo from its sources (VIIWORK_FROM_SOURCE=1) with
 * TSX_DISABLE_CACHE, which makes tsx transform every file through esbuild, so
 * the demo has children (tsx's esbuild services), as on a first run or after
 * an upgrade; the second runs it as `npx viiwork demo` does after `npm ci`
 * (compiled, when dist/ is current).
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { request } from 'undici';
import { waitFor } from '../fakes/wait.ts';

/** This file's own loopback block. */
const NET = '127.0.171';
const PORT = 8086;
/** From the signal until no process of the demo's group is left. */
const GONE_WITHIN_MS = 1000;

/** The processes whose process group is `pgid`, with their state (Z: exited, not yet reaped) and name. */
function groupMembers(pgid: number): string[] {
  const found: string[] = [];
  for (const e of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    let stat: string;
    try {
      stat = fs.readFileSync(`/proc/${e}/stat`, 'utf8');
    } catch {
      continue;
    }
    const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
    const [state, , pgrp] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (Number(pgrp) === pgid) found.push(`${e} ${state} ${comm}`);
  }
  return found;
}

function startDemo(fromSource: boolean): { child: ChildProcess; output: () => string } {
  const child = spawn(process.execPath, [path.resolve('bin/viiwork.js'), 'demo', '--quiet', '--net', NET, '--port', String(PORT), '--requests', '1'], {
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...(fromSource ? { VIIWORK_FROM_SOURCE: '1', TSX_DISABLE_CACHE: '1' } : {}) },
  });
  let text = '';
  child.stdout!.on('data', (d) => (text += d));
  child.stderr!.on('data', (d) => (text += d));
  return { child, output: () => text };
}

/** Sends SIGINT (to the group: a terminal's Ctrl-C; or to the demo alone) and waits for its group to empty. */
async function interruptAndWait(child: ChildProcess, toGroup: boolean, output: () => string): Promise<number> {
  const pgid = child.pid!;
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  try {
    const t0 = Date.now();
    process.kill(toGroup ? -pgid : pgid, 'SIGINT');
    // Polled past the bound (to 10 s), so a failure says how long the group really lasted and what was left in it.
    let left = groupMembers(pgid);
    const seen = new Set(left);
    while (left.length > 0 && Date.now() - t0 < 10_000) {
      await new Promise((r) => setTimeout(r, 20));
      left = groupMembers(pgid);
      for (const p of left) seen.add(p);
    }
    const ms = Date.now() - t0;
    assert.deepEqual(left, [], `the demo's process group still had ${left.join(', ')} 10 s after SIGINT\n${output()}`);
    assert.ok(ms <= GONE_WITHIN_MS, `the demo's process group outlived SIGINT by ${ms} ms (seen in it: ${[...seen].join(', ')})\n${output()}`);
    assert.equal(await exited, 0, output());
    return ms;
  } finally {
    try {
      process.kill(-pgid, 'SIGKILL');
    } catch {
      // the group is gone
    }
  }
}

describe('viiwork demo on Ctrl-C', { skip: !fs.existsSync('/proc/self/stat') && 'needs /proc' }, () => {
  it('once it serves, leaves no process of its group behind within a second (SIGINT to the demo alone)', async (t) => {
    const { child, output } = startDemo(true);
    try {
      await waitFor(() => output().includes('Ctrl-C stops the demo') || child.exitCode !== null, { timeoutMs: 120_000, intervalMs: 50, what: 'the demo to serve' });
      assert.equal(child.exitCode, null, output());
      const r = await request(`http://${NET}.1:${PORT}/health`);
      await r.body.dump();
      assert.equal(r.statusCode, 200);
      assert.ok(groupMembers(child.pid!).length > 1, `the demo has children (tsx's esbuild services): ${groupMembers(child.pid!).join(', ')}`);
    } catch (err) {
      process.kill(-child.pid!, 'SIGKILL');
      throw new Error(`${(err as Error).message}\n${output()}`);
    }
    t.diagnostic(`group gone ${await interruptAndWait(child, false, output)} ms after SIGINT`);
  });

  it('mid-run, as soon as its first node answers, ends the same way (SIGINT to the group, as a terminal sends it)', async (t) => {
    const { child, output } = startDemo(false);
    try {
      await waitFor(
        async () => {
          const r = await request(`http://${NET}.1:${PORT}/health`);
          await r.body.dump();
          return r.statusCode === 200;
        },
        { timeoutMs: 120_000, intervalMs: 20, what: 'the first node to answer' },
      );
      assert.ok(!output().includes('Ctrl-C stops the demo'), 'interrupted before the run ended');
    } catch (err) {
      process.kill(-child.pid!, 'SIGKILL');
      throw new Error(`${(err as Error).message}\n${output()}`);
    }
    t.diagnostic(`group gone ${await interruptAndWait(child, true, output)} ms after SIGINT`);
  });
});
