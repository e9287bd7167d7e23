import type { ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
/** Shared helpers for memberlist tests: wait on a condition with a deadline. */
export async function waitFor(cond: () => boolean | Promise<boolean>, timeoutMs: number, what: string, stepMs = 50): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, stepMs));
  }
}

/** What a child process speaking the test line protocol has said: READY, then one JSON object a line. */
export interface ChildLines {
  stderr: string;
  ready: boolean;
  lines: unknown[];
}

/** Follow a child's stdout (READY, then JSON lines) and stderr into `into`. */
export function followChild(proc: ChildProcess, into: ChildLines): void {
  proc.stderr!.on('data', (d) => (into.stderr += String(d)));
  createInterface({ input: proc.stdout! }).on('line', (l) => {
    if (l === 'READY') into.ready = true;
    else
      try {
        into.lines.push(JSON.parse(l));
      } catch {
        /* not a JSON line: the child's own chatter */
      }
  });
}
