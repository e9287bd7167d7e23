/** Processes as /proc shows them, for tests that check what a node started or left behind. */
import fs from 'node:fs';

/** The ggml-rpc-server processes whose parent is `pid` (a node's lends and its own parts). */
export function rpcChildren(pid: number): number[] {
  const out: number[] = [];
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === pid && fs.readFileSync(`/proc/${d}/cmdline`, 'utf8').includes('ggml-rpc-server')) out.push(Number(d));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}
