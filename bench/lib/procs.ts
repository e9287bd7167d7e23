/**
 * Child processes for benchmarks: each started in its own process group
 * (detached), its output in a log file, and every group killed when the
 * benchmark ends, also on an error, Ctrl-C or process.exit. CPU time per
 * process group comes from /proc (utime + stime of every process in it).
 */
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

export interface Proc {
  name: string;
  pid: number;
  child: ChildProcess;
  logFile: string;
  exited: Promise<number | null>;
  /** The last `n` characters of its log. */
  tail(n?: number): string;
}

const live = new Set<Proc>();

function killGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    // already gone
  }
}

let hooked = false;
function hookExit(): void {
  if (hooked) return;
  hooked = true;
  // Last resort: whatever is still running when this process exits dies with it.
  process.on('exit', () => {
    for (const p of live) killGroup(p.pid, 'SIGKILL');
  });
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(sig, () => {
      for (const p of live) killGroup(p.pid, 'SIGKILL');
      process.exit(130);
    });
  }
}

/** A scratch directory under the OS temp dir. */
export function scratchDir(prefix: string): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

export function startProc(name: string, cmd: string, args: string[], opts: { dir: string; env?: NodeJS.ProcessEnv }): Proc {
  hookExit();
  const logFile = path.join(opts.dir, `${name.replace(/[^A-Za-z0-9._-]/g, '_')}.log`);
  const fd = fs.openSync(logFile, 'a');
  const child = spawn(cmd, args, { detached: true, stdio: ['ignore', fd, fd], env: opts.env ?? process.env });
  fs.closeSync(fd);
  if (child.pid === undefined) throw new Error(`${name}: could not start ${cmd}`);
  const exited = new Promise<number | null>((resolve) => {
    child.once('exit', (code) => resolve(code));
    child.once('error', () => resolve(-1));
  });
  const p: Proc = {
    name,
    pid: child.pid,
    child,
    logFile,
    exited,
    tail(n = 2000) {
      try {
        const s = fs.readFileSync(logFile, 'utf8');
        return s.slice(-n);
      } catch {
        return '';
      }
    },
  };
  live.add(p);
  void exited.then(() => live.delete(p));
  return p;
}

/** SIGTERM the process group, SIGKILL it after `graceMs`. */
export async function stopProc(p: Proc, graceMs = 8000): Promise<void> {
  if (p.child.exitCode !== null || p.child.signalCode !== null) {
    killGroup(p.pid, 'SIGKILL'); // children of an exited leader
    live.delete(p);
    return;
  }
  killGroup(p.pid, 'SIGTERM');
  const timer = setTimeout(() => killGroup(p.pid, 'SIGKILL'), graceMs);
  await p.exited;
  clearTimeout(timer);
  killGroup(p.pid, 'SIGKILL');
  live.delete(p);
}

/** Name and leader pid of every group still running. */
export function livePids(): { name: string; pid: number }[] {
  return [...live].map((p) => ({ name: p.name, pid: p.pid }));
}

export async function stopAllProcs(): Promise<void> {
  await Promise.all([...live].map((p) => stopProc(p)));
}

/** Milliseconds per clock tick of /proc/PID/stat. */
export const TICK_MS = 1000 / (Number(safeExec('getconf', ['CLK_TCK'])) || 100);

function safeExec(cmd: string, args: string[]): string {
  try {
    return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return '';
  }
}

/** utime + stime (ms) and process group of one pid, or undefined when it is gone. */
function statOf(pid: number): { cpuMs: number; pgrp: number } | undefined {
  try {
    const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const rest = s.slice(s.lastIndexOf(')') + 2).split(' ');
    // rest[0] is field 3 (state); pgrp is field 5, utime 14, stime 15.
    return { pgrp: Number(rest[2]), cpuMs: (Number(rest[11]) + Number(rest[12])) * TICK_MS };
  } catch {
    return undefined;
  }
}

/** CPU milliseconds used so far by every live process of each group (keyed by leader pid). */
export function groupCpuMs(leaders: number[]): Map<number, number> {
  const want = new Set(leaders);
  const out = new Map<number, number>(leaders.map((l) => [l, 0]));
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const st = statOf(Number(entry));
    if (st && want.has(st.pgrp)) out.set(st.pgrp, out.get(st.pgrp)! + st.cpuMs);
  }
  return out;
}

/** What was measured on: written into every results file. */
export function machineInfo(): Record<string, unknown> {
  const cpus = os.cpus();
  // The viiwork under test may be another tree (VIIWORK_ROOT, e.g. a `git archive` of a commit, named by VIIWORK_COMMIT).
  const root = process.env.VIIWORK_ROOT;
  const commit = root ? (process.env.VIIWORK_COMMIT ?? '') : safeExec('git', ['rev-parse', 'HEAD']);
  const dirty = root ? '' : safeExec('git', ['status', '--porcelain', '--', 'src', 'bin']);
  return {
    at: new Date().toISOString(),
    node: process.version,
    git_commit: commit || null,
    git_src_dirty: dirty ? dirty.split('\n').length : 0,
    viiwork_root: root ? path.resolve(root) : path.resolve('.'),
    cpus: cpus.length,
    cpu_model: cpus[0]?.model ?? null,
    mem_gb: Math.round(os.totalmem() / 2 ** 30),
    kernel: `${os.type()} ${os.release()}`,
    loadavg_at_start: os.loadavg().map((x) => Number(x.toFixed(2))),
    wrk: toolVersion('wrk', ['--version'], /wrk ([^\s]+)/),
    nginx: toolVersion('nginx', ['-v'], /nginx\/([^\s]+)/),
    haproxy: toolVersion('haproxy', ['-v'], /HAProxy version ([^\s]+)/),
    portkey_gateway: packageVersion('@portkey-ai/gateway'),
  };
}

/** The version of an installed npm package, or null. */
function packageVersion(name: string): string | null {
  try {
    return (JSON.parse(fs.readFileSync(path.resolve('node_modules', name, 'package.json'), 'utf8')) as { version?: string }).version ?? null;
  } catch {
    return null;
  }
}

function toolVersion(cmd: string, args: string[], re: RegExp): string | null {
  // wrk --version exits 1 and nginx -v prints to stderr: read both, ignore the status.
  const r = spawnSync(cmd, args, { encoding: 'utf8' });
  if (r.error) return null;
  return re.exec(`${r.stdout ?? ''}${r.stderr ?? ''}`)?.[1] ?? null;
}

/** The path of an executable on PATH (or in sbin), or undefined. */
export function which(cmd: string): string | undefined {
  for (const dir of [...(process.env.PATH ?? '').split(':'), '/usr/sbin', '/sbin', '/usr/local/sbin']) {
    if (!dir) continue;
    const p = path.join(dir, cmd);
    try {
      fs.accessSync(p, fs.constants.X_OK);
      return p;
    } catch {
      // not here
    }
  }
  return undefined;
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Poll until `pred` returns truthy, or throw after `timeoutMs` naming `what`. */
export async function until<T>(pred: () => Promise<T> | T, what: string, timeoutMs = 20_000, everyMs = 50): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await pred();
      if (v) return v as NonNullable<T>;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? ` (${(last as Error).message ?? last})` : ''}`);
    await sleep(everyMs);
  }
}

/** Busy CPU milliseconds of the whole machine so far (all cores; /proc/stat minus idle and iowait). */
export function machineBusyMs(): number {
  const line = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0];
  const f = line.trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal guest guest_nice (guest is already in user)
  const busy = f[0] + f[1] + f[2] + f[5] + f[6] + f[7];
  return busy * TICK_MS;
}

/**
 * Wait until processes outside `ours` (leader pids of our groups) use less
 * than `maxShare` of one core over a 500 ms window, for at most `budgetMs`.
 * Returns the foreign share seen last (0.25 = a quarter of a core).
 */
export async function waitQuiet(ours: number[], maxShare = 0.15, budgetMs = 20_000): Promise<number> {
  const deadline = Date.now() + budgetMs;
  for (;;) {
    const b0 = machineBusyMs();
    const o0 = [...groupCpuMs(ours).values()].reduce((a, b) => a + b, 0);
    await sleep(500);
    const b1 = machineBusyMs();
    const o1 = [...groupCpuMs(ours).values()].reduce((a, b) => a + b, 0);
    const share = Math.max(0, b1 - b0 - (o1 - o0)) / 500;
    if (share <= maxShare || Date.now() > deadline) return share;
  }
}

/** Wait until `p` accepts TCP connections on `listen` ("host:port"); on failure the error carries its output and `extra`. */
export async function untilListening(p: Proc, listen: string, name: string, timeoutMs: number, extra = () => ''): Promise<void> {
  const [host, port] = listen.split(':');
  await until(
    () =>
      new Promise<boolean>((resolve) => {
        if (p.child.exitCode !== null) return resolve(false);
        const s = net.connect(Number(port), host, () => (s.destroy(), resolve(true)));
        s.on('error', () => resolve(false));
      }),
    `${name} listening on ${listen}`,
    timeoutMs,
  ).catch((err) => {
    const more = extra();
    throw new Error(`${err.message}\n${p.tail()}${more ? `\n${more}` : ''}`);
  });
}

/** A process's resident memory in MiB (VmRSS from /proc), unrounded; undefined when /proc names none. Throws as reading /proc does (a process gone). */
export function rssMiB(pid: number): number | undefined {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : undefined;
}
