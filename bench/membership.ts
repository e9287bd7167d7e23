/**
 * Membership: our TypeScript memberlist against HashiCorp Serf's agent
 * (Go memberlist), side by side, on loopback, each node its own process on
 * its own address (ours 127.0.40.N:7946, Serf 127.0.41.N:7946, RPC :7373).
 * Both sides: memberlist LAN defaults, no label (Serf 0.9.4 predates
 * labels), AES-GCM with one shared random 32-byte key (a secured mesh).
 *
 * Per cluster size (10, 30) and implementation, one after the other and
 * never together, MEMBERSHIP_RUNS fresh clusters (default 3), each:
 * - converge_ms: from the join (every node but the first given node 1 as
 *   seed, all at once) until every node lists all N as alive;
 * - steady state for 5 s: CPU and RSS (VmRSS) per node process;
 * - detect_kill_ms: SIGKILL of the last node, until every remaining node
 *   lists it as dead (ours) / failed (Serf); MEMBERSHIP_KILLS times
 *   (default 3), one node after the other, 3 s apart.
 * Reported: medians, every sample, and over all runs the false suspicions
 * ("suspect X has failed, no acks received" logged by any node about an X
 * that had not been killed) and refutations (a node refuting a suspicion
 * about itself).
 *
 * Timing comes from each node's own membership events as they are printed
 * (our child's events; Serf's `serf: EventMemberJoin/EventMemberFailed`
 * log lines), so polling cost and period do not blur it (30 `serf members`
 * processes every 150 ms would eat one of two cores); it is then confirmed
 * by asking every node for its real member list (our child's `members`,
 * `serf members -format json`). When the confirmation disagrees (say a node
 * still shows someone `suspect`), polling every 150 ms takes over and the
 * time is that of the first poll round that agrees (`via: poll`).
 *
 * Every phase gives up after PHASE_TIMEOUT_MS and reports null. Every child
 * is SIGKILLed at the end of its cluster, also on failure or interruption.
 *
 * MEMBERSHIP_SIZES=10,30  MEMBERSHIP_IMPLS=viiwork,serf  pick a subset.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { rssMiB } from './lib/procs.ts';

export interface Row {
  impl: 'viiwork' | 'serf';
  nodes: number;
  /** median over runs; null: a run timed out */
  converge_ms: number | null;
  /** median over every kill of every run; null: a kill went undetected in time */
  detect_kill_ms: number | null;
  /** mean VmRSS of the node processes at steady state */
  rss_mb_per_node: number | null;
  /** mean CPU use of one node process at steady state (% of one core) */
  cpu_pct_per_node: number | null;
  /** "suspect X has failed" about an X that was alive, over all runs */
  false_suspicions: number;
  refutations: number;
  converge_samples: string;
  detect_samples: string;
  /** how the times were settled: by events (confirmed by a query), else by polling, or timeout */
  via: string;
}

type Impl = Row['impl'];

const PORT = 7946;
const PHASE_TIMEOUT_MS = 60_000;
const START_TIMEOUT_MS = 120_000;
const SETTLE_MS = 5_000;
const POLL_MS = 150;
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const CHILD = fileURLToPath(new URL('./membership-child.ts', import.meta.url));

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

type View = Map<string, string>;

interface BenchNode {
  name: string;
  ip: string;
  proc: ChildProcess;
  ready: boolean;
  /** from the node's own events: name → alive | suspect | dead | left | failed */
  view: View;
  /** the node's real member list, or null when it does not answer */
  query(): Promise<View | null>;
  /** ours: called when the child answers a join */
  onJoined?: () => void;
}

class Cluster {
  readonly nodes: BenchNode[] = [];
  suspicions: { by: string; of: string; at: number }[] = [];
  refutations = 0;
  private listeners = new Set<() => void>();

  changed(): void {
    for (const l of this.listeners) l();
  }

  /**
   * Resolves with the time all `targets` satisfy `ok` by their events, or
   * null at `deadline`; `each` gets the time each target first did.
   */
  eventsUntil(targets: BenchNode[], ok: (v: View) => boolean, deadline: number, each = new Map<string, number>()): Promise<number | null> {
    return new Promise((resolve) => {
      const check = () => {
        const now = performance.now();
        for (const n of targets) if (!each.has(n.name) && ok(n.view)) each.set(n.name, now);
        if (targets.every((n) => ok(n.view))) finish(now);
      };
      const timer = setTimeout(() => finish(null), Math.max(0, deadline - performance.now()));
      const finish = (t: number | null) => {
        clearTimeout(timer);
        this.listeners.delete(check);
        resolve(t);
      };
      this.listeners.add(check);
      check();
    });
  }

  killAll(): void {
    for (const n of this.nodes) if (n.proc.exitCode === null && n.proc.signalCode === null) n.proc.kill('SIGKILL');
  }

  async waitExited(): Promise<void> {
    await Promise.all(
      this.nodes.map((n) =>
        n.proc.exitCode !== null || n.proc.signalCode !== null ? undefined : new Promise((r) => n.proc.once('exit', r)),
      ),
    );
  }
}

/** Every live cluster, so that an interrupted run leaves no process behind. */
const live = new Set<Cluster>();
let hooked = false;
function hookExit(): void {
  if (hooked) return;
  hooked = true;
  process.on('exit', () => {
    for (const c of live) c.killAll();
  });
  for (const sig of ['SIGINT', 'SIGTERM'] as const)
    process.once(sig, () => {
      for (const c of live) c.killAll();
      process.exit(130);
    });
}

// ---------------------------------------------------------------- ours

function startOurs(c: Cluster, i: number, key: string): BenchNode {
  const name = `viiwork-${i}`;
  const ip = `127.0.40.${i}`;
  const proc = spawn(process.execPath, ['--import', 'tsx', CHILD, name, ip, String(PORT), key], {
    cwd: ROOT,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  const waiting: ((v: View | null) => void)[] = [];
  const node: BenchNode = {
    name,
    ip,
    proc,
    ready: false,
    view: new Map([[name, 'alive']]),
    query: () =>
      new Promise((resolve) => {
        if (proc.exitCode !== null || proc.signalCode !== null || !proc.stdin!.writable) return resolve(null);
        const t = setTimeout(() => {
          const k = waiting.indexOf(done);
          if (k >= 0) waiting.splice(k, 1);
          resolve(null);
        }, 5000);
        const done = (v: View | null) => {
          clearTimeout(t);
          resolve(v);
        };
        waiting.push(done);
        proc.stdin!.write('members\n');
      }),
  };
  let stderr = '';
  proc.stderr!.on('data', (d) => (stderr = (stderr + String(d)).slice(-4000)));
  proc.on('exit', (code, sig) => {
    if (!node.ready) console.error(`${name} exited before ready (${code ?? sig}): ${stderr}`);
    for (const w of waiting.splice(0)) w(null);
  });
  proc.stdin!.on('error', () => {});
  createInterface({ input: proc.stdout! }).on('line', (line) => {
    let o: { ready?: boolean; ev?: string; n?: string; s?: string; log?: string; msg?: string; members?: [string, string][]; joined?: number; errors?: string[] };
    try {
      o = JSON.parse(line);
    } catch {
      return;
    }
    if (o.ready) node.ready = true;
    else if (o.ev && o.n && o.s) {
      node.view.set(o.n, o.s);
      c.changed();
    } else if (o.members) waiting.shift()?.(new Map(o.members));
    else if (o.joined !== undefined) {
      if (o.joined < 1) console.error(`${name}: join failed: ${JSON.stringify(o.errors)}`);
      node.onJoined?.();
    }
    else if (o.log && o.msg) {
      const s = /^suspect (\S+) has failed/.exec(o.msg);
      if (s) c.suspicions.push({ by: name, of: s[1], at: performance.now() });
      else if (/^refuting a suspect/.test(o.msg)) c.refutations++;
    }
  });
  return node;
}

// ---------------------------------------------------------------- serf

function serfMembers(ip: string): Promise<View | null> {
  return new Promise((resolve) => {
    execFile('serf', ['members', '-rpc-addr', `${ip}:7373`, '-format', 'json'], { timeout: 5000 }, (err, stdout) => {
      if (err) return resolve(null);
      try {
        const d = JSON.parse(stdout) as { members: { name: string; status: string }[] };
        resolve(new Map(d.members.map((m) => [m.name, m.status])));
      } catch {
        resolve(null);
      }
    });
  });
}

function startSerf(c: Cluster, i: number, key: string): BenchNode {
  const name = `serf-${i}`;
  const ip = `127.0.41.${i}`;
  const proc = spawn('serf', ['agent', '-node', name, '-bind', `${ip}:${PORT}`, '-rpc-addr', `${ip}:7373`, '-encrypt', key, '-log-level=info'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const node: BenchNode = { name, ip, proc, ready: false, view: new Map([[name, 'alive']]), query: () => serfMembers(ip) };
  const states: Record<string, string> = { Join: 'alive', Failed: 'failed', Leave: 'left' };
  const onLine = (line: string) => {
    let m = /serf: EventMember(Join|Failed|Leave): (\S+)/.exec(line);
    if (m) {
      node.view.set(m[2], states[m[1]]);
      c.changed();
    } else if ((m = /memberlist: Suspect (\S+) has failed/.exec(line))) c.suspicions.push({ by: name, of: m[1], at: performance.now() });
    else if (/memberlist: Refuting a suspect/.test(line)) c.refutations++;
  };
  createInterface({ input: proc.stdout! }).on('line', onLine);
  createInterface({ input: proc.stderr! }).on('line', onLine);
  return node;
}

// ---------------------------------------------------------------- measuring

/** Runs `fn` over `items`, at most `limit` at a time. */
async function mapLimit<T, R>(items: T[], limit: number, fn: (x: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) {
        const k = next++;
        out[k] = await fn(items[k]);
      }
    }),
  );
  return out;
}

/**
 * Time from t0 until every target satisfies `ok`: by events, confirmed by
 * real queries; polling when they disagree. null on timeout.
 */
async function measure(c: Cluster, targets: BenchNode[], ok: (v: View) => boolean, t0: number, impl: Impl): Promise<{ ms: number | null; via: string; spread: string }> {
  let spread = '';
  const deadline = t0 + PHASE_TIMEOUT_MS;
  const each = new Map<string, number>();
  const tEvents = await c.eventsUntil(targets, ok, deadline, each);
  if (each.size) {
    const ts = [...each.values()].map((t) => t - t0).sort((a, b) => a - b);
    const q = (p: number) => Math.round(ts[Math.min(ts.length - 1, Math.floor(p * ts.length))]);
    spread = `${each.size}/${targets.length} nodes by events; first ${q(0)}, median ${q(0.5)}, last ${q(1)} ms`;
  }
  const limit = impl === 'serf' ? 4 : targets.length;
  let first = true;
  do {
    const views = await mapLimit(targets, limit, (n) => n.query());
    if (views.every((v) => v !== null && ok(v))) {
      if (first && tEvents !== null) return { ms: Math.round(tEvents - t0), via: 'events', spread };
      return { ms: Math.round(performance.now() - t0), via: 'poll', spread };
    }
    first = false;
    await sleep(POLL_MS);
  } while (performance.now() < deadline);
  return { ms: null, via: 'timeout', spread };
}

function rssMb(pid: number | undefined): number | null {
  try {
    return rssMiB(pid as number) ?? null;
  } catch {
    return null;
  }
}

/** utime + stime of a process, in clock ticks (100 a second on Linux). */
function cpuTicks(pid: number | undefined): number | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(f[11]) + Number(f[12]);
  } catch {
    return null;
  }
}

const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null);
function median(xs: (number | null)[]): number | null {
  if (!xs.length || xs.some((x) => x === null)) return null;
  const s = (xs as number[]).slice().sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : Math.round((s[s.length / 2 - 1] + s[s.length / 2]) / 2);
}

interface RunResult {
  converge: { ms: number | null; via: string; spread?: string };
  detects: { ms: number | null; via: string; spread?: string }[];
  rss: number | null;
  cpu: number | null;
  falseSuspicions: number;
  refutations: number;
  error?: string;
}

/** One cluster: start n nodes, join them, settle, then kill -9 `kills` nodes one after the other. */
async function runCluster(impl: Impl, n: number, key: string, kills: number, run: number): Promise<RunResult> {
  const c = new Cluster();
  live.add(c);
  const res: RunResult = { converge: { ms: null, via: 'not run' }, detects: [], rss: null, cpu: null, falseSuspicions: 0, refutations: 0 };
  const log = (msg: string) => console.error(`[membership ${impl} ×${n} run ${run}] ${msg}`);
  const killedAt = new Map<string, number>();
  try {
    // start every node, unjoined
    for (let i = 1; i <= n; i++) c.nodes.push(impl === 'viiwork' ? startOurs(c, i, key) : startSerf(c, i, key));
    const startBy = performance.now() + START_TIMEOUT_MS;
    for (;;) {
      if (impl === 'serf')
        await mapLimit(
          c.nodes.filter((x) => !x.ready),
          4,
          async (x) => void (x.ready = (await x.query())?.get(x.name) === 'alive'),
        );
      if (c.nodes.every((x) => x.ready)) break;
      if (c.nodes.some((x) => x.proc.exitCode !== null || x.proc.signalCode !== null)) throw new Error('a node exited during start-up');
      if (performance.now() > startBy) throw new Error('nodes did not start in time');
      await sleep(200);
    }
    await sleep(3000); // start-up CPU (30 tsx processes) dies down

    // converge: nodes 2..n join node 1, all at once
    const names = c.nodes.map((x) => x.name);
    const seed = `${c.nodes[0].ip}:${PORT}`;
    const t0 = performance.now();
    let answered = 0;
    let joinsDone: number | string = 'not all';
    const joinAnswered = () => {
      if (++answered === n - 1) joinsDone = Math.round(performance.now() - t0);
    };
    for (const x of c.nodes.slice(1)) {
      if (impl === 'viiwork') {
        x.onJoined = joinAnswered;
        x.proc.stdin!.write(`join ${seed}\n`);
      } else
        execFile('serf', ['join', '-rpc-addr', `${x.ip}:7373`, seed], { timeout: 30_000 }, (err) => {
          if (err) log(`serf join from ${x.name}: ${err.message}`);
          joinAnswered();
        });
    }
    // a slow convergence says who is still missing whom
    const straggle = setTimeout(() => {
      const missing = c.nodes.flatMap((x) => {
        const m = names.filter((nm) => x.view.get(nm) !== 'alive');
        return m.length ? [`${x.name} lacks ${m.map((nm) => `${nm}(${x.view.get(nm) ?? 'unknown'})`).join(' ')}`] : [];
      });
      if (missing.length) log(`still not converged after 5 s: ${missing.join('; ')}`);
    }, 5000);
    res.converge = await measure(c, c.nodes, (v) => names.every((nm) => v.get(nm) === 'alive'), t0, impl);
    clearTimeout(straggle);
    log(`converged: ${res.converge.ms} ms (${res.converge.via}; ${res.converge.spread}; joins answered after ${joinsDone} ms)`);
    if (res.converge.ms === null) return res;

    // steady state: CPU and RSS per node (false suspicions would show up here too)
    const pids = c.nodes.map((x) => x.proc.pid);
    const ticks0 = pids.map(cpuTicks);
    const s0 = performance.now();
    await sleep(SETTLE_MS);
    const ticks1 = pids.map(cpuTicks);
    const secs = (performance.now() - s0) / 1000;
    res.cpu = mean(ticks1.flatMap((t, k) => (t !== null && ticks0[k] !== null ? [((t - ticks0[k]!) / 100 / secs) * 100] : [])));
    res.rss = mean(pids.map(rssMb).filter((x): x is number => x !== null));

    // kill -9 the last nodes, one at a time
    const alive = c.nodes.slice();
    for (let k = 0; k < kills; k++) {
      const victim = alive.pop()!;
      const deadState = impl === 'viiwork' ? 'dead' : 'failed';
      const t1 = performance.now();
      victim.proc.kill('SIGKILL');
      killedAt.set(victim.name, t1);
      const det = await measure(c, alive, (v) => v.get(victim.name) === deadState, t1, impl);
      res.detects.push(det);
      log(`kill ${k + 1} (${victim.name}) detected by all ${alive.length}: ${det.ms} ms (${det.via}; ${det.spread})`);
      if (det.ms === null) break;
      if (k < kills - 1) await sleep(3000);
    }
    return res;
  } catch (e) {
    res.error = (e as Error).message;
    log(`failed: ${res.error}`);
    return res;
  } finally {
    // a suspicion is false when its subject had not been killed yet
    const falses = c.suspicions.filter((s) => !(killedAt.get(s.of)! <= s.at));
    log(`suspicions logged: ${c.suspicions.length} (of killed nodes: ${c.suspicions.length - falses.length}, false: ${falses.length}); refutations: ${c.refutations}`);
    if (falses.length) log(`false suspicions: ${falses.map((s) => `${s.by} suspected ${s.of}`).join(', ')}`);
    res.falseSuspicions = falses.length;
    res.refutations = c.refutations;
    c.killAll();
    await c.waitExited();
    live.delete(c);
    await sleep(1000);
  }
}

export async function benchMembership(): Promise<Row[]> {
  hookExit();
  const sizes = (process.env.MEMBERSHIP_SIZES ?? '10,30').split(',').map(Number);
  const impls = (process.env.MEMBERSHIP_IMPLS ?? 'viiwork,serf').split(',') as Impl[];
  const runs = Number(process.env.MEMBERSHIP_RUNS ?? 3);
  const kills = Number(process.env.MEMBERSHIP_KILLS ?? 3);
  const key = randomBytes(32).toString('base64');
  const rows: Row[] = [];
  for (const n of sizes)
    for (const impl of impls) {
      const rs: RunResult[] = [];
      for (let r = 1; r <= runs; r++) rs.push(await runCluster(impl, n, key, kills, r));
      const conv = rs.map((r) => r.converge.ms);
      const det = rs.flatMap((r) => (r.converge.ms === null ? [null] : r.detects.map((d) => d.ms)));
      const vias = new Set(rs.flatMap((r) => [r.converge.via, ...r.detects.map((d) => d.via), ...(r.error ? [`error: ${r.error}`] : [])]));
      const fix1 = (x: number | null) => (x === null ? null : Number(x.toFixed(1)));
      rows.push({
        impl,
        nodes: n,
        converge_ms: median(conv),
        detect_kill_ms: median(det),
        rss_mb_per_node: fix1(mean(rs.flatMap((r) => (r.rss === null ? [] : [r.rss])))),
        cpu_pct_per_node: fix1(mean(rs.flatMap((r) => (r.cpu === null ? [] : [r.cpu])))),
        false_suspicions: rs.reduce((a, r) => a + r.falseSuspicions, 0),
        refutations: rs.reduce((a, r) => a + r.refutations, 0),
        converge_samples: conv.map((x) => x ?? 'timeout').join(' '),
        detect_samples: det.map((x) => x ?? 'timeout').join(' '),
        via: [...vias].join(', '),
      });
    }
  return rows;
}
