/**
 * What capacity knowledge costs one node (issue 11 item 5): CPU and bytes
 * per second of capacity polling and of gossip with 10, 30 and 100 members,
 * measured; 300 to 3,000 simulated (bench/polling-sim.ts, calibrated with
 * this run's per-poll costs).
 *
 * The members are light (bench/polling-child.ts `fleet`): N-1 virtual
 * members in a few processes, each on its own loopback address
 * (127.0.60.1 …), each a real memberlist member (LAN defaults, the default
 * label, open mesh) with a /v1/capacity server answering a report shaped
 * like a real node's, and, when told, polling the subject from its own
 * address as a real member does. The subject is measured on 127.0.69.1;
 * everything it exchanges with the fleet is counted by the fleet (HTTP bytes
 * on sockets, memberlist packets and streams).
 *
 * Arms, per size N, each measured POLLING_ROUNDS times over POLLING_SECONDS
 * after waiting (up to 20 s) for the machine to be quiet:
 *
 *   idle         an idle `node --import tsx` process: the floor of the
 *                child arms (poll, rawpoll, gossip)
 *   node alone   a real `viiwork serve` (one sim model of its own, open mesh)
 *                alone: the floor of the node arms
 *   poll         (largest fleet) a bare CapacityPoller (src/capacity/
 *                poller.ts) polling 9, 29, 59 and 99 of the members every
 *                second (a node of a mesh of 10, 30, 60, 100), rounds
 *                interleaved: the polling side alone, against the rate;
 *                `poll x10` polls the 99 every 100 ms, the marginal cost
 *   rawpoll      (largest fleet, every 100 ms) undici polls as the poller
 *                sends them, plain and with If-None-Match answered 304: what
 *                conditional polls would save on the polling side
 *   answer       (largest fleet) the node alone (not in the mesh), polled
 *                every second by 9, 29, 59 and 99 members, and every 100 ms
 *                by 99 (`answer x10`): the answering side alone
 *   gossip       a bare memberlist member joined to the fleet: gossip alone
 *   node         the node in the fleet, asked for three models served by
 *                members (a trickle of 2 req/s, forwarded to them): polling
 *                every member, polled by every member every second,
 *                gossiping (all of it, today's scheme)
 *   node-new     the same node and trickle with mesh.capacity_background
 *                15s, polled every second only by the share of members that
 *                route to a member in the simulation's mixed layout, the
 *                others every 15 s
 *
 * CPU is the process's (process.cpuUsage in the children; /proc utime +
 * stime for the node, 10 ms ticks), in % of one core; `net` takes the arm's
 * floor off. The machine is shared: each measurement records the CPU other
 * processes used meanwhile (`foreign_cores`), and contention only ever adds
 * CPU time, so the lowest round is reported beside the median.
 *
 * Env: POLLING_SIZES (10,30,100), POLLING_ROUNDS (3), POLLING_SECONDS (10),
 * POLLING_ARMS (idle,poll,rawpoll,answer,gossip,node,node-new),
 * POLLING_DIGESTS (changing: every report carries each target's whole cache
 * digest, 4 slots × 50 links, the upper bound; steady: resent only when it
 * changed; off), POLLING_SIM=0 to skip the simulation, POLLING_PROFILE=1 (the node arms
 * under --cpu-prof, self time by function in the results), POLLING_SIM_SIZES
 * (10,30,100,300,1000,3000), POLLING_SIM_SECONDS (1800), POLLING_FROM=FILE
 * to recompute the summary and simulation from an earlier results file.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { API_PORT, fakeDigest, fakeReport, GOSSIP_PORT, memberAddr, SUBJECT_IP } from './polling-child.ts';
import { DEFAULT_CALIBRATION, simulate, simulateAll, type Calibration } from './polling-sim.ts';
import { groupCpuMs, machineBusyMs, machineInfo, scratchDir, sleep, stopAllProcs, stopProc, until, waitQuiet } from './lib/procs.ts';
import { summariseProfile } from './lib/cpuprofile.ts';
import { getJson, startViiwork, type BenchNode } from './lib/viiwork.ts';

const CHILD = fileURLToPath(new URL('./polling-child.ts', import.meta.url));
/** Members per fleet process: enough processes that no one of them is the bottleneck on two cores. */
const PER_FLEET_PROC = 50;
const SLOW_MS = 15_000;
/** Members polled (and polling) in the rate arms: meshes of 10, 30, 60 and 100. */
const CURVE_K = [9, 29, 59, 99];
/** Time for a new process to warm up (JIT, connections) before it is measured. */
const WARMUP_MS = 5000;

const env = process.env;
const SIZES = (env.POLLING_SIZES ?? '10,30,100').split(',').map(Number);
const ROUNDS = Number(env.POLLING_ROUNDS ?? 3);
/** Cache digests in the fleet's reports (bench/polling-child.ts FleetOpts.digests): `changing` by default, the upper bound. */
const DIGESTS = (env.POLLING_DIGESTS ?? 'changing') as 'off' | 'steady' | 'changing';
const SECONDS = Number(env.POLLING_SECONDS ?? 10);
const ARMS = (env.POLLING_ARMS ?? 'idle,poll,rawpoll,answer,gossip,node,node-new').split(',');

/** A child of bench/polling-child.ts, spoken to over stdin/stdout, in its own process group. */
class Child {
  readonly proc: ChildProcess;
  readonly #waiters: ((o: Record<string, unknown>) => boolean)[] = [];
  readonly exited: Promise<void>;
  constructor(
    readonly name: string,
    args: string[],
    logDir: string,
  ) {
    const log = fs.openSync(path.join(logDir, `${name}.log`), 'a');
    this.proc = spawn(process.execPath, ['--import', 'tsx', CHILD, ...args], { detached: true, stdio: ['pipe', 'pipe', log] });
    fs.closeSync(log);
    children.add(this);
    this.exited = new Promise((r) => this.proc.once('exit', () => (children.delete(this), r())));
    createInterface({ input: this.proc.stdout! }).on('line', (line) => {
      let o: Record<string, unknown>;
      try {
        o = JSON.parse(line);
      } catch {
        return;
      }
      const i = this.#waiters.findIndex((w) => w(o));
      if (i >= 0) this.#waiters.splice(i, 1);
    });
  }
  get pid(): number {
    return this.proc.pid!;
  }
  /** Send a command; resolve with the first line that has `key`. */
  ask<T = Record<string, unknown>>(cmd: string | undefined, key: string, timeoutMs = 60_000): Promise<T> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${this.name}: no "${key}" within ${timeoutMs} ms`)), timeoutMs);
      this.#waiters.push((o) => {
        if (!(key in o)) return false;
        clearTimeout(timer);
        resolve(o as T);
        return true;
      });
      if (cmd !== undefined) this.proc.stdin!.write(cmd + '\n');
    });
  }
  async stop(): Promise<void> {
    try {
      process.kill(-this.pid, 'SIGKILL');
    } catch {
      // gone
    }
    await this.exited;
  }
}

const children = new Set<Child>();
process.on('exit', () => {
  for (const c of children) {
    try {
      process.kill(-c.pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
});

interface FleetStats {
  cpu_us: number;
  polls_served: number;
  polls_of_subject: number;
  subject_poll_in: number;
  subject_poll_out: number;
  subject_answer_in: number;
  subject_answer_out: number;
  subject_gossip_in: number;
  subject_gossip_out: number;
}

class Fleet {
  constructor(readonly procs: Child[]) {}
  static async start(n: number, models: number, dir: string): Promise<Fleet> {
    const procs: Child[] = [];
    for (let first = 1; first <= n; first += PER_FLEET_PROC) {
      const count = Math.min(PER_FLEET_PROC, n - first + 1);
      const c = new Child(`fleet-${first}`, ['fleet', String(first), String(count), SUBJECT_IP, JSON.stringify({ models, gossip: true, changeMs: 0, digests: DIGESTS })], dir);
      procs.push(c);
    }
    await Promise.all(procs.map((c) => c.ask(undefined, 'ready', 120_000)));
    const fleet = new Fleet(procs);
    // Every member joins member 1 (the first process's members join each other through it too).
    const seed = `${memberAddr(1)}:${GOSSIP_PORT}`;
    await Promise.all(procs.map((c) => c.ask(`join ${seed}`, 'joined', 120_000)));
    await until(async () => (await Promise.all(procs.map((c) => c.ask<{ members: number }>('members', 'members')))).every((r) => r.members >= n), `fleet of ${n} converged`, 120_000, 500);
    return fleet;
  }
  async stats(): Promise<FleetStats> {
    const all = await Promise.all(this.procs.map((c) => c.ask<{ stats: FleetStats }>('stats', 'stats')));
    const sum = {} as Record<string, number>;
    for (const { stats } of all) for (const [k, v] of Object.entries(stats)) sum[k] = (sum[k] ?? 0) + (v as number);
    return sum as unknown as FleetStats;
  }
  /** Members poll the subject: the first hotShare of them every `everyMs`, the others every slowMs; 'off' stops. */
  async poll(hotShare: number | 'off', slowMs = SLOW_MS, everyMs = 1000): Promise<void> {
    await Promise.all(this.procs.map((c) => c.ask(`poll ${hotShare} ${slowMs} ${everyMs}`, 'polling')));
  }
  async stop(): Promise<void> {
    await Promise.all(this.procs.map((c) => c.stop()));
  }
}

export interface Measurement {
  arm: string;
  members: number;
  round: number;
  seconds: number;
  /** CPU of the measured process, % of one core (before taking any floor off). */
  cpu_pct: number;
  /** Bytes per second the subject received and sent, by channel (counted by the fleet). */
  poll_bytes_in: number;
  poll_bytes_out: number;
  answer_bytes_in: number;
  answer_bytes_out: number;
  gossip_bytes_in: number;
  gossip_bytes_out: number;
  /** Capacity polls per second the subject sent / answered. */
  polls_sent: number;
  polls_answered: number;
  /** CPU used meanwhile by processes outside the measured one and the fleet, in cores. */
  foreign_cores: number;
}

type CpuReader = () => Promise<number>; // CPU ms so far

async function measure(arm: string, members: number, round: number, cpuMs: CpuReader, fleet: Fleet | undefined, ours: number[]): Promise<Measurement> {
  await waitQuiet(ours, 0.15, 20_000);
  const s0 = fleet ? await fleet.stats() : undefined;
  const c0 = await cpuMs();
  const b0 = machineBusyMs();
  const o0 = [...groupCpuMs(ours).values()].reduce((a, b) => a + b, 0);
  const t0 = performance.now();
  await sleep(SECONDS * 1000);
  const s1 = fleet ? await fleet.stats() : undefined;
  const c1 = await cpuMs();
  const dt = performance.now() - t0;
  const b1 = machineBusyMs();
  const o1 = [...groupCpuMs(ours).values()].reduce((a, b) => a + b, 0);
  const rate = (k: keyof FleetStats) => (s0 && s1 ? Math.round(((s1[k] - s0[k]) / dt) * 1000) : 0);
  const m: Measurement = {
    arm,
    members,
    round,
    seconds: Number((dt / 1000).toFixed(2)),
    cpu_pct: Number((((c1 - c0) / dt) * 100).toFixed(3)),
    poll_bytes_in: rate('subject_poll_in'),
    poll_bytes_out: rate('subject_poll_out'),
    answer_bytes_in: rate('subject_answer_in'),
    answer_bytes_out: rate('subject_answer_out'),
    gossip_bytes_in: rate('subject_gossip_in'),
    gossip_bytes_out: rate('subject_gossip_out'),
    polls_sent: s0 && s1 ? Number((((s1.polls_served - s0.polls_served) / dt) * 1000).toFixed(1)) : 0,
    polls_answered: s0 && s1 ? Number((((s1.polls_of_subject - s0.polls_of_subject) / dt) * 1000).toFixed(1)) : 0,
    foreign_cores: Number((Math.max(0, b1 - b0 - (o1 - o0)) / dt).toFixed(3)),
  };
  console.error(`  ${arm} N=${members} round ${round}: ${m.cpu_pct.toFixed(2)}% cpu, polls ${m.polls_sent}/s out ${m.polls_answered}/s in, foreign ${m.foreign_cores}`);
  return m;
}

const childCpu = (c: Child): CpuReader => async () => (await c.ask<{ cpu_us: number }>('stats', 'cpu_us')).cpu_us / 1000;
const procCpu = (pid: number): CpuReader => async () => groupCpuMs([pid]).get(pid) ?? 0;

const SIM_MODEL = { name: 'subject-model', engine: 'sim', parallel: 4, sim: { ttft_ms: 20, prefill_ms_per_1k: 5, tokens_per_s: 200, output_tokens: 4 } };

async function startSubject(dir: string, tag: string, seeded: boolean, mesh: Record<string, unknown> = {}): Promise<BenchNode> {
  return startViiwork(
    {
      name: `subject-${tag}`,
      ip: SUBJECT_IP,
      apiPort: API_PORT,
      gossipPort: GOSSIP_PORT,
      models: [SIM_MODEL],
      seeds: seeded ? [`${memberAddr(1)}:${GOSSIP_PORT}`] : [],
      mesh,
      // POLLING_PROFILE=1: where the node's CPU goes (the profile spans its start too; compare arms by function).
      nodeArgs: env.POLLING_PROFILE === '1' ? ['--cpu-prof', `--cpu-prof-dir=${path.join(dir, 'prof', tag)}`] : [],
    },
    dir,
  );
}

/** Self time per function of the node's main-thread profile, in ms, start-up (module loading) left out. */
function profileOf(dir: string, tag: string): Record<string, number> | undefined {
  const pdir = path.join(dir, 'prof', tag);
  if (!fs.existsSync(pdir)) return undefined;
  const files = fs.readdirSync(pdir).filter((f) => f.endsWith('.cpuprofile')).sort();
  if (!files.length) return undefined;
  const s = summariseProfile(path.join(pdir, files[0]), 40);
  const busyMs = (s.span_ms * (100 - s.idle_pct)) / 100;
  const out: Record<string, number> = { busy_ms: Math.round(busyMs) };
  for (const f of s.top_functions) if (!/modules\/|tsx|esbuild|bootstrap/.test(f.fn)) out[f.fn] = Math.round((f.self_pct * busyMs) / 100);
  return out;
}

/** Until the node lists every member alive and holds a report of each (fresh or not). */
async function waitNodeSees(node: BenchNode, n: number): Promise<void> {
  await until(
    async () => {
      const mesh = await getJson<{ members: { state: string }[] }>(`${node.url}/v1/mesh`);
      const fleet = await getJson<{ models: { hosts: { node: string }[] }[] }>(`${node.url}/v1/fleet/capacity`);
      const hosts = new Set(fleet.models.flatMap((m) => m.hosts.map((h) => h.node)));
      return mesh.members.filter((m) => m.state === 'alive').length >= n && hosts.size >= n;
    },
    `${node.name} sees ${n} members`,
    120_000,
    500,
  );
}

/** A trickle of requests for models served by some members: what makes a node route to them. */
function trickle(node: BenchNode, models: string[], perSecond: number): () => Promise<number> {
  let sent = 0;
  let ok = 0;
  const timer = setInterval(() => {
    const model = models[sent % models.length];
    sent++;
    void request(`${node.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] }) })
      .then(async (r) => {
        await r.body.text();
        if (r.statusCode === 200) ok++;
      })
      .catch(() => {});
  }, 1000 / perSecond);
  return async () => {
    clearInterval(timer);
    await sleep(500);
    return sent ? ok / sent : 1;
  };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.floor((s.length - 1) / 2)] : NaN;
}

export interface PollingDoc {
  machine: Record<string, unknown>;
  settings: Record<string, unknown>;
  measurements: Measurement[];
  summary: Row[];
  calibration?: Calibration;
  simulation?: ReturnType<typeof simulateAll>;
  /** POLLING_PROFILE=1: the node arms' self time by function (ms). */
  profiles?: Record<string, Record<string, number>>;
  skipped: { arm: string; why: string }[];
}

/** Models in the fleet of N members: five hosts each, as the simulation's mixed layout. */
const modelsFor = (n: number) => Math.max(2, Math.round(n / 5));

export async function benchPolling(): Promise<PollingDoc> {
  if (env.POLLING_FROM) {
    const doc = JSON.parse(fs.readFileSync(env.POLLING_FROM, 'utf8')) as PollingDoc;
    doc.settings.recomputed = { at: new Date().toISOString(), from: path.basename(env.POLLING_FROM) };
    return recompute(doc);
  }
  const dir = scratchDir('viiwork-polling-');
  const doc: PollingDoc = {
    machine: machineInfo(),
    settings: { sizes: SIZES, rounds: ROUNDS, seconds: SECONDS, arms: ARMS, slow_ms: SLOW_MS, per_fleet_proc: PER_FLEET_PROC, warmup_ms: WARMUP_MS },
    measurements: [],
    summary: [],
    skipped: [],
  };
  const ms = doc.measurements;
  const has = (arm: string) => ARMS.includes(arm);
  const largest = Math.max(...SIZES);
  // The simulation first: node-new's members poll the subject as the simulation's mixed layout says they would.
  const simRouted = new Map<number, number>();
  if (has('node-new')) {
    for (const n of SIZES) {
      const row = simulate('mixed', n, 'routed+bg15s', DEFAULT_CALIBRATION, 900);
      // Polls a member answers per second = routed + (others) / 15: the share of members that route to it.
      simRouted.set(n, Math.min(1, Math.max(0, (row.polls_mean_per_s - (n - 1) / (SLOW_MS / 1000)) / ((n - 1) * (1 - 1000 / SLOW_MS)))));
    }
  }
  try {
    if (has('idle')) {
      const idle = new Child('idle', ['idle'], dir);
      await idle.ask(undefined, 'ready');
      await sleep(WARMUP_MS);
      for (let r = 1; r <= ROUNDS; r++) ms.push(await measure('idle', 1, r, childCpu(idle), undefined, [idle.pid]));
      await idle.stop();
    }
    if (has('node') || has('node-new') || has('answer')) {
      const alone = await startSubject(dir, 'alone', false);
      await sleep(WARMUP_MS);
      for (let r = 1; r <= ROUNDS; r++) ms.push(await measure('node alone', 1, r, procCpu(alone.proc.pid), undefined, [alone.proc.pid]));
      await stopSubject(alone);
    }
    for (const n of SIZES) {
      console.error(`polling: ${n} members`);
      const fleet = await Fleet.start(n - 1, modelsFor(n), dir);
      const fleetPids = fleet.procs.map((c) => c.pid);
      const child = async (arm: string, args: string[], ready: (c: Child) => Promise<unknown>) => {
        const c = new Child(`${arm.replace(/\s+/g, '-')}-${n}`, args, dir);
        await c.ask(undefined, 'ready', 60_000);
        await ready(c);
        await sleep(WARMUP_MS);
        for (let r = 1; r <= ROUNDS; r++) ms.push(await measure(arm, n, r, childCpu(c), fleet, [c.pid, ...fleetPids]));
        return c;
      };
      // Polling and answering against the rate, on the largest fleet: k of its members every second (a node of a
      // mesh of k+1), rounds interleaved over k so the machine's drift falls on every rate alike; then ten times the
      // rate (every 100 ms), the marginal cost of a poll.
      const ks = [...new Set(CURVE_K.map((k) => Math.min(k, n - 1)))];
      if (has('poll') && n === largest) {
        const run = async (arm: string, k: number, intervalMs: number, r: number) => {
          const c = new Child(`${arm.replace(/\s+/g, '-')}-${k}`, ['poller', String(k), JSON.stringify({ intervalMs, localAddress: SUBJECT_IP })], dir);
          await c.ask(undefined, 'ready', 60_000);
          await until(async () => (await c.ask<{ reports: number }>('stats', 'reports')).reports >= k, 'poller has every report', 30_000, 200);
          await sleep(WARMUP_MS);
          ms.push(await measure(arm, k + 1, r, childCpu(c), fleet, [c.pid, ...fleetPids]));
          await c.stop();
        };
        for (let r = 1; r <= ROUNDS; r++) for (const k of ks) await run('poll', k, 1000, r);
        for (let r = 1; r <= ROUNDS; r++) await run('poll x10', n - 1, 100, r);
      }
      if (has('rawpoll') && n === largest) {
        const answered = (c: Child) => until(async () => (await c.ask<{ answers: number }>('stats', 'answers')).answers >= 2 * (n - 1), 'raw polls answered', 30_000, 200);
        for (const conditional of [false, true]) {
          const arm = conditional ? 'rawpoll 304 x10' : 'rawpoll 200 x10';
          await (await child(arm, ['rawpoll', String(n - 1), JSON.stringify({ intervalMs: 100, localAddress: SUBJECT_IP, conditional })], answered)).stop();
        }
      }
      if (has('answer') && n === largest) {
        const node = await startSubject(dir, `answer${n}`, false);
        const run = async (arm: string, k: number, every: number, r: number) => {
          // The first k members poll the node every `every` ms, the others not at all.
          await fleet.poll(k / (n - 1), 3_600_000, every);
          await sleep(WARMUP_MS);
          ms.push(await measure(arm, k + 1, r, procCpu(node.proc.pid), fleet, [node.proc.pid, ...fleetPids]));
          await fleet.poll('off');
        };
        for (let r = 1; r <= ROUNDS; r++) for (const k of ks) await run('answer', k, 1000, r);
        for (let r = 1; r <= ROUNDS; r++) await run('answer x10', n - 1, 100, r);
        await stopSubject(node);
      }
      if (has('gossip')) {
        const g = await child('gossip', ['gossip', SUBJECT_IP, `${memberAddr(1)}:${GOSSIP_PORT}`, '{}'], async (c) => {
          await until(async () => (await c.ask<{ members: number }>('stats', 'members')).members >= n, 'gossip subject sees everyone', 60_000, 200);
        });
        await g.ask('leave', 'left', 10_000).catch(() => {});
        await g.stop();
        await sleep(1000);
      }
      for (const arm of ['node', 'node-new'].filter(has)) {
        const fresh = arm === 'node-new';
        const node = await startSubject(dir, `${arm}${n}`, true, fresh ? { capacity_background: `${SLOW_MS}ms` } : {});
        await waitNodeSees(node, n);
        await fleet.poll(fresh ? (simRouted.get(n) ?? 1) : 1, SLOW_MS);
        // Both arms are asked for three models served by members (the simulation's node is asked for its own and two
        // others), so what differs between them is the polling.
        const asked = [1, 2, 3].map((k) => `model-${k % modelsFor(n)}`);
        const stopTrickle = trickle(node, asked, 2);
        await sleep(WARMUP_MS);
        for (let r = 1; r <= ROUNDS; r++) ms.push(await measure(arm, n, r, procCpu(node.proc.pid), fleet, [node.proc.pid, ...fleetPids]));
        const okShare = await stopTrickle();
        if (okShare < 1) doc.skipped.push({ arm: `${arm} N=${n}`, why: `only ${(okShare * 100).toFixed(1)}% of the trickle's requests were answered 200` });
        await fleet.poll('off');
        await stopSubject(node);
        const prof = profileOf(dir, `${arm}${n}`);
        if (prof) (doc.profiles ??= {})[`${arm} N=${n}`] = prof;
        await sleep(1000);
      }
      await fleet.stop();
    }
  } finally {
    await Promise.all([...children].map((c) => c.stop()));
    await stopAllProcs();
  }
  return recompute(doc);
}

/** Summary, calibration and simulation from the measurements (also for a results file read back: POLLING_FROM). */
function recompute(doc: PollingDoc): PollingDoc {
  doc.summary = summarize(doc.measurements);
  doc.calibration = calibrate(doc.summary);
  if (env.POLLING_SIM !== '0') {
    const sizes = (env.POLLING_SIM_SIZES ?? '10,30,100,300,1000,3000').split(',').map(Number);
    doc.simulation = simulateAll(doc.calibration, sizes, Number(env.POLLING_SIM_SECONDS ?? 1800));
  }
  return doc;
}

async function stopSubject(node: BenchNode): Promise<void> {
  await stopProc(node.proc);
}

type Row = Record<string, number | string | null>;

function summarize(ms: Measurement[]): Row[] {
  const floor = (arm: string) => median(ms.filter((m) => m.arm === arm).map((m) => m.cpu_pct));
  const idle = floor('idle');
  const alone = floor('node alone');
  const rows: Row[] = [];
  const keys = [...new Set(ms.map((m) => `${m.arm}\0${m.members}`))];
  for (const key of keys) {
    const [arm, members] = key.split('\0');
    const xs = ms.filter((m) => m.arm === arm && m.members === Number(members));
    const med = (f: (m: Measurement) => number) => median(xs.map(f));
    const cpu = med((m) => m.cpu_pct);
    const low = Math.min(...xs.map((m) => m.cpu_pct));
    const base = /^(poll|rawpoll|gossip)/.test(arm) ? idle : /^(node|answer)/.test(arm) && arm !== 'node alone' ? alone : NaN;
    const net = (x: number) => (Number.isNaN(base) ? null : Number(Math.max(0, x - base).toFixed(3)));
    const sent = med((m) => m.polls_sent);
    const answered = med((m) => m.polls_answered);
    // Per poll only where polls are all the arm does (the node arms also gossip and run their own timers).
    const polls = /^(poll|rawpoll)/.test(arm) ? sent : /^answer/.test(arm) ? answered : 0;
    rows.push({
      arm,
      members: Number(members),
      cpu_pct: Number(cpu.toFixed(3)),
      cpu_pct_lowest: Number(low.toFixed(3)),
      cpu_pct_net: net(cpu),
      cpu_pct_net_lowest: net(low),
      /** CPU µs per poll sent or answered, floor taken off (median round). */
      us_per_poll: polls > 0 && !Number.isNaN(base) ? Number(((Math.max(0, cpu - base) * 1e4) / polls).toFixed(1)) : null,
      bytes_in_per_s: med((m) => m.poll_bytes_in + m.answer_bytes_in + m.gossip_bytes_in),
      bytes_out_per_s: med((m) => m.poll_bytes_out + m.answer_bytes_out + m.gossip_bytes_out),
      poll_bytes_per_s: med((m) => m.poll_bytes_in + m.poll_bytes_out),
      answer_bytes_per_s: med((m) => m.answer_bytes_in + m.answer_bytes_out),
      gossip_bytes_per_s: med((m) => m.gossip_bytes_in + m.gossip_bytes_out),
      polls_sent: sent,
      polls_answered: answered,
      foreign_cores_max: Math.max(...xs.map((m) => m.foreign_cores)),
      runs: xs.length,
    });
  }
  return rows;
}

/** Per-poll costs for the simulation, from this run (stand-ins where an arm did not run). */
function calibrate(rows: Row[]): Calibration {
  const cal: Calibration = { ...DEFAULT_CALIBRATION, gossip_cpu: { ...DEFAULT_CALIBRATION.gossip_cpu }, gossip_bytes: { ...DEFAULT_CALIBRATION.gossip_bytes } };
  const used: string[] = [];
  const pick = (arm: string) => rows.filter((r) => r.arm === arm).sort((a, b) => Number(b.members) - Number(a.members))[0];
  // Per-poll costs at the real cadence (every member once a second, at the largest size): each poll or answer
  // then comes with its share of wake-ups, as on a node of a large mesh. The x10 arms (warm, ten times the rate)
  // give the marginal cost, a lower bound, reported beside them.
  const sendArm = pick('poll') ?? pick('poll x10');
  if (sendArm?.us_per_poll) {
    cal.send_us = Number(sendArm.us_per_poll);
    used.push(`send_us from ${sendArm.arm} N=${sendArm.members}`);
    const sent = Number(sendArm.polls_sent);
    const perPoll = Number(sendArm.poll_bytes_per_s) / sent;
    if (sent > 0 && perPoll > 0) {
      // The fleet's reports carry 1.2 models on average (every fifth member serves two).
      const bodies = [1, 2].map((k) => Buffer.byteLength(fakeReport(5 * k - (k === 1 ? 4 : 0), 20, 0, Date.now())));
      cal.answer_model_bytes = bodies[1] - bodies[0];
      // A target's digest in the report (`,"digest":{…}`), whole and unchanged; the measured polls carried the run's kind.
      cal.digest_bytes = Buffer.byteLength(`,"digest":${JSON.stringify(fakeDigest(1, 123456))}`);
      cal.digest_unchanged_bytes = Buffer.byteLength(`,"digest":${JSON.stringify({ v: 123456 })}`);
      const digestPerModel = DIGESTS === 'changing' ? cal.digest_bytes : DIGESTS === 'steady' ? cal.digest_unchanged_bytes : 0;
      cal.answer_header_bytes = Math.max(0, Math.round(perPoll - cal.request_bytes - 1.2 * (cal.answer_model_bytes + digestPerModel)));
      used.push('bytes from the poll arm');
    }
  }
  const ans = pick('answer') ?? pick('answer x10');
  if (ans?.us_per_poll) {
    cal.answer_us = Number(ans.us_per_poll);
    used.push(`answer_us from ${ans.arm} N=${ans.members}`);
  }
  const plain = pick('rawpoll 200 x10');
  const cond = pick('rawpoll 304 x10');
  if (plain?.us_per_poll && cond?.us_per_poll) {
    cal.not_modified_saving = Number(Math.max(0, 1 - Number(cond.us_per_poll) / Number(plain.us_per_poll)).toFixed(3));
    const cb = Number(cond.poll_bytes_per_s) / Number(cond.polls_sent);
    if (cb > 0) cal.not_modified_bytes = Math.round(cb - cal.request_bytes);
    used.push('304 saving from rawpoll');
  }
  // CPU against rate, sending and answering, from every size (and the x10 arms).
  const curve = (re: RegExp, rate: 'polls_sent' | 'polls_answered') =>
    rows.filter((r) => re.test(String(r.arm)) && r.cpu_pct_net !== null && Number(r[rate]) > 0).map((r) => [Number(r[rate]), Number(r.cpu_pct_net)] as [number, number]);
  const sendCurve = curve(/^poll( x10)?$/, 'polls_sent');
  const answerCurve = curve(/^answer( x10)?$/, 'polls_answered');
  if (sendCurve.length >= 2 && answerCurve.length >= 2) {
    cal.send_curve = sendCurve;
    cal.answer_curve = answerCurve;
    used.push('CPU against rate from the poll and answer arms');
  }
  const g = rows.filter((r) => r.arm === 'gossip' && r.cpu_pct_net !== null);
  if (g.length >= 2) {
    // Least squares of cpu and bytes on x = N / pushPullScale(N).
    const fit = (ys: number[], xs: number[]) => {
      const mx = xs.reduce((a, b) => a + b, 0) / xs.length;
      const my = ys.reduce((a, b) => a + b, 0) / ys.length;
      const sxx = xs.reduce((a, x) => a + (x - mx) ** 2, 0);
      const b = sxx ? xs.reduce((a, x, i) => a + (x - mx) * (ys[i] - my), 0) / sxx : 0;
      return { a: Number(Math.max(0, my - b * mx).toFixed(4)), b: Number(Math.max(0, b).toFixed(5)) };
    };
    const xs = g.map((r) => Number(r.members) / (Number(r.members) <= 32 ? 1 : Math.ceil(Math.log2(Number(r.members)) - 5) + 1));
    cal.gossip_cpu = fit(g.map((r) => Number(r.cpu_pct_net)), xs);
    cal.gossip_bytes = fit(g.map((r) => Number(r.gossip_bytes_per_s)), xs);
    used.push('gossip fitted over the measured sizes');
  }
  cal.source = used.length ? used.join('; ') : 'defaults';
  return cal;
}

export function printPolling(doc: PollingDoc): void {
  console.table(doc.summary);
  if (doc.calibration) console.log('calibration:', JSON.stringify(doc.calibration));
  if (doc.simulation) {
    console.table(doc.simulation.rows.map((r) => ({ layout: r.layout, N: r.members, scheme: r.scheme, sent: r.polls_sent_per_s, mean: r.polls_mean_per_s, max: r.polls_answered_max_per_s, cpu: r.cpu_pct, bytes: r.bytes_per_s, fresh: r.fresh_view_share, waited: r.waited_one_poll, partial: r.partial_view, age_p99: r.routed_age_p99_ms })));
    console.table(doc.simulation.alternatives);
  }
  if (doc.profiles) console.log(JSON.stringify(doc.profiles, null, 1));
  if (doc.skipped.length) console.table(doc.skipped);
}
