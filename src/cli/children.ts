/**
 * This process's child processes, ended and reaped before it exits.
 *
 * A command that runs through tsx has children of its own even when it spawns
 * none: tsx's esbuild services, one per thread that transforms a file (the
 * main thread, each node's gossip worker) when tsx's cache misses. A child is
 * reaped by the thread that spawned it, and only while that thread runs: once
 * a gossip worker has ended, its esbuild (which then exits, its stdin closed)
 * stays a zombie until the process exits, and after that it is pid 1's to
 * reap, which can take seconds; all that while it is in the command's process
 * group. So a command that ends on a signal calls endChildren() before it
 * stops what runs in its threads, and exits only after that.
 *
 * Linux only (/proc); elsewhere there is nothing listed and nothing to wait for.
 */
import fs from 'node:fs';

/** The pids whose parent is this process, zombies (exited, not yet reaped) included. */
export function childPids(): number[] {
  let entries: string[];
  try {
    entries = fs.readdirSync('/proc');
  } catch {
    return [];
  }
  const pids: number[] = [];
  for (const e of entries) {
    if (!/^\d+$/.test(e)) continue;
    const stat = procStat(Number(e));
    if (stat && stat.ppid === process.pid) pids.push(Number(e));
  }
  return pids;
}

/** State and parent of `pid` from /proc/<pid>/stat; undefined once it is gone (reaped). */
function procStat(pid: number): { state: string; ppid: number } | undefined {
  let text: string;
  try {
    text = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  // "pid (comm) state ppid …": comm may hold spaces and parentheses, so split after its last ')'.
  const [state, ppid] = text.slice(text.lastIndexOf(')') + 2).split(' ');
  return { state, ppid: Number(ppid) };
}

/** Whether `pid` is still one of ours and not yet reaped. */
const stillOurs = (pid: number) => procStat(pid)?.ppid === process.pid;

const signal = (pid: number, sig: NodeJS.Signals) => {
  try {
    process.kill(pid, sig);
  } catch {
    // gone already
  }
};

/**
 * Sends `sig` to every child, gives them `graceMs` to end, SIGKILLs the rest,
 * and waits (at most `reapMs` more) until they have been reaped. Resolves with
 * the pids still there at the end (none, normally).
 */
export async function endChildren(sig: NodeJS.Signals, graceMs: number, reapMs: number): Promise<number[]> {
  let left = childPids();
  if (left.length === 0) return [];
  for (const pid of left) signal(pid, sig);
  const waitGone = async (ms: number) => {
    const deadline = Date.now() + ms;
    for (;;) {
      left = left.filter(stillOurs);
      if (left.length === 0 || Date.now() >= deadline) return;
      await new Promise((r) => setTimeout(r, 10));
    }
  };
  await waitGone(graceMs);
  for (const pid of left) signal(pid, 'SIGKILL');
  await waitGone(reapMs);
  return left;
}
