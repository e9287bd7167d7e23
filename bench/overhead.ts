/**
 * Overhead of the hop: five arms side by side in one run, loaded by wrk (a
 * C load generator; an in-Node generator saturates near 7k req/s here and
 * hides the differences), all on loopback and on the same cores:
 *
 *   engine   the zero-delay engine itself (bench/fakes/zero-engine.mjs)
 *   bare     a ~30-line node:http + undici stream() pass-through (bench/fakes/bare-proxy.mjs)
 *   nginx    nginx, one worker, keep-alive upstream, proxy_buffering off
 *   haproxy  haproxy, one thread, HTTP mode, keep-alive and connection reuse
 *   portkey  the Portkey AI gateway (@portkey-ai/gateway, installed from npm on first use),
 *            provider openai with the engine as custom host; a request of
 *            each body is probed first, and a body it cannot serve is
 *            skipped with the reason
 *   node     one viiwork node (engine: openai) in front of the engine
 *   entry+executor  a gateway node without models (127.0.55.12) joined to the
 *            executor node (127.0.55.11); the request enters the gateway
 *   entry+executor-secured  the same in a secured mesh (signed forwards),
 *            on 127.0.55.14 → 127.0.55.13; only when named in OVERHEAD_ARMS
 *
 * For a tiny chat JSON answer and a 16-chunk SSE stream, at 16 connections
 * and at 1: requests/s, p50/p90/p99, and the CPU milliseconds per request
 * of every process on the path (utime+stime from /proc, before and after).
 * Rounds are interleaved (round 1 of every arm, then round 2, ...) and the
 * medians reported, so a disturbance hits all arms alike. Everything listens
 * on 127.0.55.x. Writes bench/results/overhead.svg (req/s ÷ bare by arm).
 *
 * Env: OVERHEAD_SECONDS (5 per measurement), OVERHEAD_ROUNDS (3),
 * OVERHEAD_WARMUP (2 s per arm and body before the first round),
 * OVERHEAD_ARMS (comma list), OVERHEAD_CONNS ("16,1"), OVERHEAD_QUIET_MS
 * (5000: before each measurement, wait up to this long for other processes
 * to use under 15% of a core; what they used during each run is recorded as
 * foreign_cpu_share), OVERHEAD_PROFILE=1 (nodes under --cpu-prof, with a
 * self-time summary per node; slower, not for the ratios), OVERHEAD_HEAP=1
 * (nodes sample every byte they allocate instead, bench/fakes/heap-hook.mjs:
 * the .heapprofile files are kept in the scratch dir with OVERHEAD_KEEP=1),
 * OVERHEAD_KEEP=1
 * (keep the scratch dir: logs, configs, .cpuprofile files),
 * OVERHEAD_BASE_ROOT=<tree> with the arms node-base and entry+executor-base
 * (an older commit's checkout run beside this one, interleaved round by
 * round, so a comparison of two commits shares the machine's every
 * disturbance), OVERHEAD_MAX_FOREIGN (0.3: a run during which other processes used more
 * than this share of a core is left out of the summary when its arm has a
 * quieter run), OVERHEAD_FROM=a.json,b.json (measure nothing; summarise the
 * runs of earlier results files together).
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { request } from 'undici';
import { summariseProfile, type ProfileSummary } from './lib/cpuprofile.ts';
import { startHaproxy } from './lib/haproxy.ts';
import { startNginx } from './lib/nginx.ts';
import { ensurePortkey, portkeyHeaders, probePortkey, startPortkey } from './lib/portkey.ts';
import { groupCpuMs, machineBusyMs, machineInfo, scratchDir, startProc, stopAllProcs, until, waitQuiet, which, type Proc } from './lib/procs.ts';
import { startViiwork, waitConverged, waitFleet, type BenchNode } from './lib/viiwork.ts';
import { barChart } from './lib/svg.ts';
import { postScript, runWrk, type WrkResult } from './lib/wrk.ts';

const HERE = path.dirname(new URL(import.meta.url).pathname);
const HEAP_HOOK = path.join(HERE, 'fakes/heap-hook.mjs');
const ARMS = ['engine', 'bare', 'nginx', 'haproxy', 'portkey', 'node', 'entry+executor', 'entry+executor-secured', 'node-base', 'entry+executor-base'] as const;
/** Issue 8's five arms and issue 11's peers (haproxy, Portkey); the secured pair (signed forwards) only when named in OVERHEAD_ARMS. */
const DEFAULT_ARMS = ['engine', 'bare', 'nginx', 'haproxy', 'portkey', 'node', 'entry+executor'];
type Arm = (typeof ARMS)[number];
type Body = 'json' | 'sse';

const ENGINE = '127.0.55.1:18700';
const BARE = '127.0.55.2:18701';
const NGINX = '127.0.55.3:18702';
const HAPROXY = '127.0.55.4:18703';
const PORTKEY = '127.0.55.5:18704';
const API_PORT = 18710;
const GOSSIP_PORT = 18711;

export interface ArmSetup {
  arm: Arm;
  url: string;
  /** process names on the path, in order from the client */
  path: string[];
  /** viiwork nodes on the path (for "added p50 per node") */
  nodes: number;
  /** request headers it needs (Portkey's provider and custom host) */
  headers?: Record<string, string>;
  /** the bodies it serves (default both) */
  bodies?: Body[];
}

export interface OverheadRow {
  arm: Arm;
  body: Body;
  connections: number;
  rps: number;
  p50_ms: number;
  p99_ms: number;
  rps_vs_bare: number | null;
  /** best of the rounds (disturbances on a shared machine only ever lower throughput) */
  rps_best: number;
  rps_best_vs_bare: number | null;
  p50_best_ms: number;
  added_p50_best_ms_per_hop: number | null;
  /** at 1 connection: (p50 − engine direct p50) ÷ viiwork nodes on the path (for bare/nginx: ÷ 1) */
  added_p50_ms_per_hop: number | null;
  /**
   * CPU ms per request of the bare path ÷ of this arm's path (engine
   * included): the throughput ratio these costs predict when the machine is
   * CPU-bound; steadier than req/s on a shared machine.
   */
  cpu_ratio_vs_bare: number | null;
  /** CPU ms per request of each process on the path */
  cpu_ms_per_req: Record<string, number>;
  errors: number;
  /** the most CPU (share of one core) that processes outside the benchmark used during one of its rounds */
  foreign_cpu_share_max: number;
  /** how many runs the row stands on (after leaving out disturbed ones) */
  runs_used: number;
  rounds: number[];
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}
const r2 = (x: number) => Math.round(x * 100) / 100;
const r3 = (x: number) => Math.round(x * 1000) / 1000;

export async function benchOverhead(): Promise<Record<string, unknown>> {
  const seconds = Number(process.env.OVERHEAD_SECONDS ?? 5);
  const rounds = Number(process.env.OVERHEAD_ROUNDS ?? 3);
  const warmup = Number(process.env.OVERHEAD_WARMUP ?? 2);
  const conns = (process.env.OVERHEAD_CONNS ?? '16,1').split(',').map(Number);
  // Before each measurement, wait up to this long for the machine to be quiet (other processes under 15% of a core).
  const quietBudget = Number(process.env.OVERHEAD_QUIET_MS ?? 5000);
  // OVERHEAD_PROFILE=1: run the viiwork nodes under --cpu-prof and report where their CPU went (slower; not for the ratios).
  const profile = process.env.OVERHEAD_PROFILE === '1';
  const wanted = new Set((process.env.OVERHEAD_ARMS ?? DEFAULT_ARMS.join(',')).split(','));
  const maxForeign = Number(process.env.OVERHEAD_MAX_FOREIGN ?? 0.3);
  if (process.env.OVERHEAD_FROM) return fromStored(process.env.OVERHEAD_FROM.split(','), maxForeign);
  const machine = machineInfo();
  const skipped: { arm: string; body?: Body; reason: string }[] = [];
  const settings = { max_foreign_share: maxForeign, seconds, rounds, warmup_s: warmup, connections: conns, wrk_threads: 1, nginx_workers: 1, quiet_wait_ms: quietBudget };

  if (!which('wrk')) {
    for (const a of ARMS) if (wanted.has(a)) skipped.push({ arm: a, reason: 'wrk is not installed (apt-get install wrk)' });
    return { ...machine, settings, skipped, rows: [], runs: [], targets: [] };
  }

  const dir = scratchDir('viiwork-overhead-');
  // OVERHEAD_HEAP=1: a sampling profile of every byte each node allocates instead (bench/fakes/heap-hook.mjs; kept with OVERHEAD_KEEP=1).
  const heap = process.env.OVERHEAD_HEAP === '1';
  if (heap) process.env.VW_HEAP_DIR = path.join(dir, 'heap');
  const profArgs = (name: string) =>
    heap ? [`--import=${HEAP_HOOK}`] : profile ? ['--cpu-prof', `--cpu-prof-dir=${path.join(dir, `prof-${name}`)}`] : [];
  const procs = new Map<string, Proc>();
  const setups: ArmSetup[] = [];
  const runs: Record<string, unknown>[] = [];
  const bodies: Record<Body, string> = {
    json: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hello' }] }),
    sse: JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: 'hello' }] }),
  };
  try {
    // The engine every arm ends at.
    const [eh, ep] = ENGINE.split(':');
    procs.set('engine', startProc('engine', process.execPath, [path.join(HERE, 'fakes/zero-engine.mjs'), eh, ep], { dir }));
    await untilHttp(`http://${ENGINE}/health`, 'zero engine');
    if (wanted.has('engine')) setups.push({ arm: 'engine', url: `http://${ENGINE}/v1/chat/completions`, path: ['engine'], nodes: 0 });

    if (wanted.has('bare')) {
      try {
        const [h, p] = BARE.split(':');
        procs.set('bare', startProc('bare', process.execPath, [...profArgs('bare').filter((a) => a.startsWith('--import')), path.join(HERE, 'fakes/bare-proxy.mjs'), h, p, `http://${ENGINE}`], { dir }));
        await untilHttp(`http://${BARE}/health`, 'bare pass-through');
        setups.push({ arm: 'bare', url: `http://${BARE}/v1/chat/completions`, path: ['bare', 'engine'], nodes: 0 });
      } catch (err) {
        skipped.push({ arm: 'bare', reason: String((err as Error).message).slice(0, 500) });
      }
    }

    if (wanted.has('nginx')) {
      if (!which('nginx')) skipped.push({ arm: 'nginx', reason: 'nginx is not installed (apt-get install nginx-light)' });
      else {
        try {
          const ndir = path.join(dir, 'nginx');
          fs.mkdirSync(ndir);
          procs.set('nginx', await startNginx('nginx', { dir: ndir, listen: NGINX, upstreams: [ENGINE] }));
          await untilHttp(`http://${NGINX}/health`, 'nginx');
          setups.push({ arm: 'nginx', url: `http://${NGINX}/v1/chat/completions`, path: ['nginx', 'engine'], nodes: 0 });
        } catch (err) {
          skipped.push({ arm: 'nginx', reason: String((err as Error).message).slice(0, 500) });
        }
      }
    }

    if (wanted.has('haproxy')) {
      if (!which('haproxy')) skipped.push({ arm: 'haproxy', reason: 'haproxy is not installed (apt-get install haproxy)' });
      else {
        try {
          const hdir = path.join(dir, 'haproxy');
          fs.mkdirSync(hdir);
          procs.set('haproxy', await startHaproxy('haproxy', { dir: hdir, listen: HAPROXY, upstreams: [{ name: 'engine', addr: ENGINE }], balance: 'roundrobin' }));
          await untilHttp(`http://${HAPROXY}/health`, 'haproxy');
          setups.push({ arm: 'haproxy', url: `http://${HAPROXY}/v1/chat/completions`, path: ['haproxy', 'engine'], nodes: 0 });
        } catch (err) {
          skipped.push({ arm: 'haproxy', reason: String((err as Error).message).slice(0, 500) });
        }
      }
    }

    if (wanted.has('portkey')) {
      const missing = ensurePortkey();
      if (missing) skipped.push({ arm: 'portkey', reason: missing });
      else {
        try {
          const pdir = path.join(dir, 'portkey');
          fs.mkdirSync(pdir);
          const proc = await startPortkey('portkey', { dir: pdir, listen: PORTKEY, engine: ENGINE });
          procs.set('portkey', proc);
          const headers = portkeyHeaders(ENGINE);
          const url = `http://${PORTKEY}/v1/chat/completions`;
          const bodiesOk: Body[] = [];
          for (const body of ['json', 'sse'] as Body[]) {
            const why = await probePortkey(url, headers, bodies[body], proc);
            if (why === undefined) bodiesOk.push(body);
            else skipped.push({ arm: 'portkey', body, reason: `${body === 'sse' ? 'streaming' : 'a JSON answer'} through the gateway fails on Node ${process.version}: ${why}` });
          }
          if (bodiesOk.length) setups.push({ arm: 'portkey', url, path: ['portkey', 'engine'], nodes: 0, headers, bodies: bodiesOk });
        } catch (err) {
          skipped.push({ arm: 'portkey', reason: String((err as Error).message).slice(0, 800) });
        }
      }
    }

    const model = { name: 'm', engine: 'openai', url: `http://${ENGINE}`, parallel: 256 };
    const routing = { queue_max: 1024 };
    // OVERHEAD_BASE_ROOT: another tree (an older commit's checkout) run as the -base arms, interleaved with this one's.
    const baseRoot = process.env.OVERHEAD_BASE_ROOT;
    for (const [arm, name, ip, root] of [['node', 'solo', '127.0.55.10', undefined], ['node-base', 'solo-base', '127.0.55.20', baseRoot]] as const) {
      if (!wanted.has(arm)) continue;
      if (arm === 'node-base' && !root) {
        skipped.push({ arm, reason: 'OVERHEAD_BASE_ROOT names no tree to compare with' });
        continue;
      }
      try {
        const solo = await startViiwork({ name, ip, apiPort: API_PORT, gossipPort: GOSSIP_PORT, models: [model], routing, nodeArgs: profArgs(arm), root }, dir);
        procs.set(arm, solo.proc);
        await waitFleet(solo, 'm', [name]);
        setups.push({ arm, url: `${solo.url}/v1/chat/completions`, path: [arm, 'engine'], nodes: 1 });
      } catch (err) {
        skipped.push({ arm, reason: String((err as Error).message).slice(0, 800) });
      }
    }

    const pairs = [
      // Open pair on 127.0.55.11 (executor) and .12 (gateway); the secured pair on .13 and .14; the base tree's on .21 and .22.
      { arm: 'entry+executor', xi: '127.0.55.11', gi: '127.0.55.12', sfx: '', secured: false, root: undefined },
      { arm: 'entry+executor-secured', xi: '127.0.55.13', gi: '127.0.55.14', sfx: '-s', secured: true, root: undefined },
      { arm: 'entry+executor-base', xi: '127.0.55.21', gi: '127.0.55.22', sfx: '-base', secured: false, root: baseRoot },
    ] as const;
    for (const { arm, xi, gi, sfx, secured, root } of pairs) {
      if (!wanted.has(arm)) continue;
      if (arm === 'entry+executor-base' && !root) {
        skipped.push({ arm, reason: 'OVERHEAD_BASE_ROOT names no tree to compare with' });
        continue;
      }
      const secret = secured ? randomBytes(32).toString('base64') : undefined;
      try {
        const exec: BenchNode = await startViiwork({ name: `executor${sfx}`, ip: xi, apiPort: API_PORT, gossipPort: GOSSIP_PORT, models: [model], routing, secret, root, nodeArgs: profArgs(`executor${sfx}`) }, dir);
        procs.set(`executor${sfx}`, exec.proc);
        const gw = await startViiwork({ name: `gateway${sfx}`, ip: gi, apiPort: API_PORT, gossipPort: GOSSIP_PORT, models: [], routing, secret, root, seeds: [`${xi}:${GOSSIP_PORT}`], nodeArgs: profArgs(`gateway${sfx}`) }, dir);
        procs.set(`gateway${sfx}`, gw.proc);
        await waitConverged([exec, gw]);
        await waitFleet(gw, 'm', [`executor${sfx}`]);
        // One request through the gateway proves the forward path before loading it.
        const r = await request(`${gw.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"model":"m","messages":[{"role":"user","content":"hi"}]}' });
        const text = await r.body.text();
        if (r.statusCode !== 200 || r.headers['x-viiwork-node'] !== `executor${sfx}`) throw new Error(`probe through the gateway: HTTP ${r.statusCode}, ran on ${r.headers['x-viiwork-node']}: ${text.slice(0, 300)}`);
        setups.push({ arm, url: `${gw.url}/v1/chat/completions`, path: [`gateway${sfx}`, `executor${sfx}`, 'engine'], nodes: 2 });
      } catch (err) {
        skipped.push({ arm, reason: String((err as Error).message).slice(0, 800) });
      }
    }

    const scripts: Record<Body, string> = { json: postScript(dir, 'json', bodies.json), sse: postScript(dir, 'sse', bodies.sse) };
    const scriptFor = (s: ArmSetup, body: Body) => (s.headers ? postScript(dir, `${s.arm}-${body}`, bodies[body], s.headers) : scripts[body]);

    const leaders = () => [...procs.entries()].map(([name, p]) => ({ name, pid: p.pid }));
    const measure = async (s: ArmSetup, body: Body, c: number, secs: number) => {
      const ls = leaders();
      const quietBefore = await waitQuiet(ls.map((l) => l.pid), 0.15, quietBudget);
      const busy0 = machineBusyMs();
      const before = groupCpuMs(ls.map((l) => l.pid));
      const w: WrkResult = await runWrk({ url: s.url, script: scriptFor(s, body), connections: c, seconds: secs });
      const after = groupCpuMs(ls.map((l) => l.pid));
      const busy1 = machineBusyMs();
      const cpu: Record<string, number> = {};
      let ours = 0;
      for (const l of ls) {
        cpu[l.name] = Math.round(after.get(l.pid)! - before.get(l.pid)!);
        ours += cpu[l.name];
      }
      // CPU that neither our processes nor wrk used during the run: other work on the machine that disturbed it.
      const foreign = Math.max(0, busy1 - busy0 - ours - (w.wrk_cpu_ms ?? 0));
      return { w, cpu, foreign_cpu_share: Math.round((foreign / (w.seconds * 1000)) * 100) / 100, foreign_share_before: Math.round(quietBefore * 100) / 100 };
    };

    // Warm up every arm (JIT, connection pools), not measured.
    if (warmup > 0) {
      for (const s of setups) for (const body of s.bodies ?? (['json', 'sse'] as Body[])) await measure(s, body, 16, warmup).catch(() => undefined);
    }

    for (let round = 1; round <= rounds; round++) {
      for (const c of conns) {
        for (const body of ['json', 'sse'] as Body[]) {
          for (const s of setups) {
            if (s.bodies && !s.bodies.includes(body)) continue;
            try {
              const { w, cpu, foreign_cpu_share, foreign_share_before } = await measure(s, body, c, seconds);
              runs.push({ round, arm: s.arm, body, connections: c, ...w, cpu_ms: cpu, foreign_cpu_share, foreign_share_before });
              console.log(`round ${round} c=${c} ${body.padEnd(4)} ${s.arm.padEnd(15)} ${String(w.rps).padStart(6)} req/s  p50 ${w.p50_ms.toFixed(2)} ms  p99 ${w.p99_ms.toFixed(2)} ms  foreign cpu ${foreign_cpu_share}${w.errors + w.non2xx ? `  errors ${w.errors} non-2xx ${w.non2xx}` : ''}`);
            } catch (err) {
              runs.push({ round, arm: s.arm, body, connections: c, error: String((err as Error).message).slice(0, 500) });
              console.log(`round ${round} c=${c} ${body} ${s.arm}: ${(err as Error).message}`);
            }
          }
        }
      }
    }
  } finally {
    await stopAllProcs();
  }

  const rows = summarise(setups, runs, conns, maxForeign);
  const targets = checkTargets(rows);
  const profiles: Record<string, ProfileSummary[]> = {};
  if (profile) {
    for (const name of ['node', 'gateway', 'executor', 'gateway-s', 'executor-s']) {
      const pdir = path.join(dir, `prof-${name}`);
      if (!fs.existsSync(pdir)) continue;
      profiles[name] = fs.readdirSync(pdir).filter((f) => f.endsWith('.cpuprofile')).map((f) => summariseProfile(path.join(pdir, f)));
    }
  }
  if (process.env.OVERHEAD_KEEP === '1') console.log(`kept ${dir} (logs, configs, profiles)`);
  else fs.rmSync(dir, { recursive: true, force: true });
  return { ...machine, settings: { ...settings, profiled: profile }, skipped, rows, targets, ...(profile ? { profiles } : {}), runs };
}

/**
 * Rows from the runs. Runs during which other processes used more than
 * `maxForeign` of a core are left out when the same arm, body and
 * connection count has at least one quieter run.
 */
export function summarise(setups: ArmSetup[], runs: Record<string, any>[], conns: number[], maxForeign = Infinity): OverheadRow[] {
  const rows: OverheadRow[] = [];
  for (const c of conns) {
    for (const body of ['json', 'sse'] as Body[]) {
      const ok = (arm: string) => {
        const all = runs.filter((r) => r.arm === arm && r.body === body && r.connections === c && r.error === undefined);
        const quiet = all.filter((r) => (r.foreign_cpu_share ?? 0) <= maxForeign);
        return quiet.length ? quiet : all;
      };
      const med = (arm: string, k: string) => {
        const xs = ok(arm).map((r) => r[k] as number);
        return xs.length ? median(xs) : NaN;
      };
      const best = (arm: string, k: string, f: (...xs: number[]) => number) => {
        const xs = ok(arm).map((r) => r[k] as number);
        return xs.length ? f(...xs) : NaN;
      };
      const bareRps = med('bare', 'rps');
      const engineP50 = med('engine', 'p50_ms');
      const bareBest = best('bare', 'rps', Math.max);
      const engineP50Best = best('engine', 'p50_ms', Math.min);
      const pathCpu = (arm: string) => {
        const rs = ok(arm);
        const st = setups.find((x) => x.arm === arm);
        if (!rs.length || !st) return NaN;
        const requests = rs.reduce((a, r) => a + r.requests, 0);
        return st.path.reduce((a, name) => a + rs.reduce((b, r) => b + (r.cpu_ms[name] ?? 0), 0), 0) / requests;
      };
      const bareCpu = pathCpu('bare');
      for (const s of setups) {
        const rs = ok(s.arm);
        if (!rs.length) continue;
        const requests = rs.reduce((a, r) => a + r.requests, 0);
        const cpu: Record<string, number> = {};
        for (const name of s.path) cpu[name] = r3(rs.reduce((a, r) => a + (r.cpu_ms[name] ?? 0), 0) / requests);
        const rps = med(s.arm, 'rps');
        const p50 = med(s.arm, 'p50_ms');
        const hops = Math.max(1, s.nodes);
        rows.push({
          arm: s.arm,
          body,
          connections: c,
          rps: Math.round(rps),
          p50_ms: r3(p50),
          p99_ms: r3(med(s.arm, 'p99_ms')),
          rps_vs_bare: Number.isFinite(bareRps) ? r2(rps / bareRps) : null,
          added_p50_ms_per_hop: s.arm === 'engine' || !Number.isFinite(engineP50) ? null : r3((p50 - engineP50) / hops),
          cpu_ratio_vs_bare: Number.isFinite(bareCpu) ? r2(bareCpu / pathCpu(s.arm)) : null,
          rps_best: best(s.arm, 'rps', Math.max),
          rps_best_vs_bare: Number.isFinite(bareBest) ? r2(best(s.arm, 'rps', Math.max) / bareBest) : null,
          p50_best_ms: r3(best(s.arm, 'p50_ms', Math.min)),
          added_p50_best_ms_per_hop: s.arm === 'engine' || !Number.isFinite(engineP50Best) ? null : r3((best(s.arm, 'p50_ms', Math.min) - engineP50Best) / hops),
          cpu_ms_per_req: cpu,
          errors: rs.reduce((a, r) => a + r.errors + r.non2xx, 0),
          foreign_cpu_share_max: Math.max(...rs.map((r) => r.foreign_cpu_share ?? 0)),
          runs_used: rs.length,
          rounds: rs.map((r) => r.rps),
        });
      }
    }
  }
  return rows;
}

/** Each target on the medians of the rounds and on the best round; `met` only when both meet it. */
export function checkTargets(rows: OverheadRow[]) {
  const find = (arm: Arm, body: Body, c: number) => rows.find((r) => r.arm === arm && r.body === body && r.connections === c);
  const out: { target: string; measured: number | null; best_round: number | null; goal: string; met: boolean | null }[] = [];
  const push = (target: string, m: number | null | undefined, b: number | null | undefined, goal: string, ok: (x: number) => boolean) =>
    out.push({ target, measured: m ?? null, best_round: b ?? null, goal, met: m == null || b == null ? null : ok(m) && ok(b) });
  for (const body of ['json', 'sse'] as Body[]) {
    const n = find('node', body, 16);
    push(`one node, ${body}, 16 connections: req/s vs bare`, n?.rps_vs_bare, n?.rps_best_vs_bare, '≥ 0.90', (x) => x >= 0.9);
    const e = find('entry+executor', body, 16);
    push(`entry+executor, ${body}, 16 connections: req/s vs bare`, e?.rps_vs_bare, e?.rps_best_vs_bare, '≥ 0.40', (x) => x >= 0.4);
  }
  for (const body of ['json', 'sse'] as Body[]) {
    for (const arm of ['node', 'entry+executor'] as Arm[]) {
      const r = find(arm, body, 1);
      push(`${arm}, ${body}, 1 connection: added p50 per node (ms)`, r?.added_p50_ms_per_hop, r?.added_p50_best_ms_per_hop, '≤ 1 ms', (x) => x <= 1);
    }
  }
  return out;
}

/** The path of each arm, for summaries of stored runs. */
function setupOf(arm: Arm): ArmSetup {
  const paths: Record<Arm, [string[], number]> = {
    engine: [['engine'], 0],
    bare: [['bare', 'engine'], 0],
    nginx: [['nginx', 'engine'], 0],
    haproxy: [['haproxy', 'engine'], 0],
    portkey: [['portkey', 'engine'], 0],
    node: [['node', 'engine'], 1],
    'entry+executor': [['gateway', 'executor', 'engine'], 2],
    'entry+executor-secured': [['gateway-s', 'executor-s', 'engine'], 2],
    'node-base': [['node-base', 'engine'], 1],
    'entry+executor-base': [['gateway-base', 'executor-base', 'engine'], 2],
  };
  return { arm, url: '', path: paths[arm][0], nodes: paths[arm][1] };
}

/** OVERHEAD_FROM=a.json,b.json: no new measurement; the runs of earlier results files summarised together (rounds renumbered). */
function fromStored(files: string[], maxForeign: number): Record<string, unknown> {
  const docs = files.map((f) => JSON.parse(fs.readFileSync(f, 'utf8')) as Record<string, any>);
  const runs: Record<string, any>[] = [];
  let offset = 0;
  for (const d of docs) {
    const rounds = Math.max(0, ...d.runs.map((r: any) => r.round));
    runs.push(...d.runs.map((r: any) => ({ ...r, round: r.round + offset, from: d.at })));
    offset += rounds;
  }
  const arms = [...new Set(runs.map((r) => r.arm as Arm))];
  const order = ARMS.filter((a) => arms.includes(a));
  const conns = [...new Set(runs.map((r) => r.connections as number))].sort((a, b) => b - a);
  const rows = summarise(order.map(setupOf), runs, conns, maxForeign);
  const first = docs[0];
  return {
    ...first,
    merged_from: docs.map((d) => ({ at: d.at, git_commit: d.git_commit, loadavg_at_start: d.loadavg_at_start })),
    settings: { ...first.settings, rounds: offset, max_foreign_share: maxForeign },
    rows,
    targets: checkTargets(rows),
    runs,
  };
}

async function untilHttp(url: string, what: string): Promise<void> {
  await until(
    async () => {
      const r = await request(url);
      await r.body.text();
      return r.statusCode < 500;
    },
    what,
    10_000,
  );
}

export function printOverhead(doc: Record<string, any>): void {
  for (const s of doc.skipped ?? []) console.log(`skipped ${s.arm}${s.body ? ` (${s.body})` : ''}: ${s.reason}`);
  const rows = (doc.rows as OverheadRow[]).map((r) => ({
    arm: r.arm,
    body: r.body,
    conns: r.connections,
    'req/s': r.rps,
    'p50 ms': r.p50_ms,
    'p99 ms': r.p99_ms,
    'vs bare': r.rps_vs_bare,
    'best req/s': r.rps_best,
    'best vs bare': r.rps_best_vs_bare,
    'cpu vs bare': r.cpu_ratio_vs_bare,
    '+p50/node ms': r.added_p50_ms_per_hop,
    foreign: r.foreign_cpu_share_max,
    'cpu ms/req': Object.entries(r.cpu_ms_per_req)
      .map(([k, v]) => `${k} ${v}`)
      .join(', '),
  }));
  console.table(rows);
  for (const [name, list] of Object.entries((doc.profiles ?? {}) as Record<string, ProfileSummary[]>)) {
    for (const p of list) {
      console.log(`\nprofile of ${name} (${p.span_ms} ms span, ${p.idle_pct}% idle; a node has two profiles: its main thread and the tsx loader thread); self time, share of busy:`);
      for (const f of p.top_files.slice(0, 8)) console.log(`  ${String(f.self_pct).padStart(5)}%  ${f.file}`);
      console.log('  top functions:');
      for (const f of p.top_functions.slice(0, 12)) console.log(`  ${String(f.self_pct).padStart(5)}%  ${f.fn}`);
    }
  }
  for (const t of doc.targets ?? []) console.log(`${t.met === null ? 'n/a ' : t.met ? 'MET ' : 'MISS'}  ${t.target}: ${t.measured} median, ${t.best_round} best round (target ${t.goal})`);
  console.log(`machine: ${doc.cpus} × ${doc.cpu_model}, ${doc.node}, commit ${String(doc.git_commit).slice(0, 10)}${doc.git_src_dirty ? ' (+uncommitted src changes)' : ''}, load at start ${doc.loadavg_at_start}`);
}

/** The chart of the overhead results: requests/s ÷ the bare pass-through's, by arm, for each body and connection count (medians of the rounds). */
export function overheadChart(doc: Record<string, any>): string {
  const rows = (doc.rows ?? []) as OverheadRow[];
  const arms = ARMS.filter((a) => a !== 'engine' && a !== 'bare' && rows.some((r) => r.arm === a));
  const conns = [...new Set(rows.map((r) => r.connections))].sort((a, b) => b - a);
  const groups = conns.flatMap((c) =>
    (['json', 'sse'] as Body[]).map((body) => ({
      label: `${body === 'json' ? 'JSON' : 'SSE'}, ${c} conn${c === 1 ? '' : 's'}`,
      values: arms.map((a) => rows.find((r) => r.arm === a && r.body === body && r.connections === c)?.rps_vs_bare ?? null),
      notes: arms.map((a) => ((doc.skipped ?? []) as { arm: string; body?: string }[]).some((s) => s.arm === a && (s.body === undefined || s.body === body)) ? 'skipped' : undefined),
    })),
  );
  return barChart({
    title: 'Throughput of each hop ÷ a bare Node pass-through',
    subtitle: `zero-delay engine, wrk, median of ${doc.settings?.rounds ?? '?'} rounds; 1 = the ~30-line node:http + undici proxy; ${String(doc.git_commit ?? '').slice(0, 10)} ${String(doc.at ?? '').slice(0, 10)}`,
    yLabel: 'req/s ÷ bare (higher is cheaper)',
    series: arms,
    groups,
    refs: [{ y: 1, label: 'bare = 1' }],
  });
}
