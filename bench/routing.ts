/**
 * Routing quality, first arm set (issue 8's acceptance 2; issue 11 grows it).
 *
 * Three engines that queue like llama-server (bench/fakes/slot-engine.mjs):
 * 2 slots each, first token 60, 120 and 240 ms after a slot is granted, then
 * five tokens 10 ms apart. Capacity = Σ slots ÷ (first token + 50 ms)
 * ≈ 36.8 req/s. A fixed, seeded trace of Poisson arrivals (streamed chat
 * requests, each with a random entry node) is replayed open-loop (every
 * request is sent at its time whatever happened to the earlier ones) against
 * each arm, on the same engines:
 *
 *   viiwork      three nodes on 127.0.0.1-3 (open mesh, seeds), one engine
 *                each (parallel 2); each request enters its trace's node
 *   least_conn   nginx least_conn in front of the three engines
 *   oracle       the benchmark itself sends each request to the engine that
 *                an exact model of the engines ranks best: it knows each
 *                engine's speed and slots, what it has in flight there and
 *                when each slot will free (a FIFO model re-synchronised with
 *                what the client sees), and picks the least
 *                ORACLE_WAIT_WEIGHT × queue wait + first-token delay
 *   greedy       the same model, picking where this request's first token
 *                comes soonest (weight 1). Myopic: at 80% load it queues on
 *                the fast engine and loses to least_conn (see
 *                ORACLE_WAIT_WEIGHT), so it is not the reference
 *   round_robin  the benchmark cycles through the engines (only when named
 *                in ROUTING_ARMS)
 *
 * TTFT is measured at the client from the request's scheduled time to the
 * first content chunk. A request is lost when it gets no complete answer
 * (connection error, timeout, a stream without [DONE]).
 *
 * Then the drain experiment: 40 one-second requests at once over 8 slots of
 * one node (its engine queues nothing: parallel 8 in the node, 8 slots in
 * the engine), sent to a gateway node without the model vs to the executor
 * node directly; the time until the last one finishes.
 *
 * The trace of each load is cut into ROUTING_SEGMENTS (3) segments with
 * their own seeds, each started on idle engines; the arms take turns
 * segment by segment, so a disturbance of the shared machine falls on all.
 *
 * Env: ROUTING_LOADS ("0.5:30,0.8:60": load:seconds), ROUTING_ARMS,
 * ROUTING_SEED (1), ROUTING_WARMUP_S (10, viiwork only), ROUTING_DRAIN
 * (0 to skip), ROUTING_DRAIN_ROUNDS (2).
 */
import { seeded } from '../test/helpers/random.ts';
import fs from 'node:fs';
import path from 'node:path';
import { Agent, request } from 'undici';
import { startNginx } from './lib/nginx.ts';
import { groupCpuMs, livePids, machineBusyMs, machineInfo, scratchDir, sleep, startProc, stopAllProcs, stopProc, until, waitQuiet, which, type Proc } from './lib/procs.ts';
import { getJson, startViiwork, waitConverged, waitFleet, type BenchNode } from './lib/viiwork.ts';

const HERE = path.dirname(new URL(import.meta.url).pathname);
const ENGINES = [
  { name: 'e60', port: 18801, slots: 2, firstMs: 60 },
  { name: 'e120', port: 18802, slots: 2, firstMs: 120 },
  { name: 'e240', port: 18803, slots: 2, firstMs: 240 },
];
const TOKENS = 5;
const TOKEN_MS = 10;
const SERVICE_TAIL_MS = TOKENS * TOKEN_MS;
const CAPACITY = ENGINES.reduce((a, e) => a + e.slots / ((e.firstMs + SERVICE_TAIL_MS) / 1000), 0);
const NGINX_LISTEN = '127.0.0.1:18820';
const API_PORT = 18810;
const GOSSIP_PORT = 18811;
const REQUEST_DEADLINE_MS = 30_000;
const ARMS = ['viiwork', 'least_conn', 'oracle', 'greedy', 'round_robin'] as const;
/** Run by default; round_robin on request (ROUTING_ARMS). */
const DEFAULT_ARMS = ['viiwork', 'least_conn', 'oracle', 'greedy'];
/**
 * The oracle counts a wait in an engine's queue this many times over: a
 * request queued behind others also delays everyone who comes after it. A
 * simulation of these engines (deterministic service, Poisson arrivals, the
 * policy given the engines' exact state) gave mean TTFT at 50% / 80% load:
 * soonest first token (weight 1) 100 / 193 ms, weight 1.5 94 / 170, 2 93 / 162,
 * 3 93 / 156, 4 94 / 155, least_conn 128 / 175.
 */
const ORACLE_WAIT_WEIGHT = 3;
type Arm = (typeof ARMS)[number];

interface Arrival {
  at: number;
  entry: number;
}

/** Deterministic PRNG (mulberry32), the one the property tests use. */
const rng = seeded;

export function poissonTrace(ratePerS: number, seconds: number, seed: number, entries = 3): Arrival[] {
  const r = rng(seed);
  const out: Arrival[] = [];
  let t = 0;
  for (;;) {
    t += (-Math.log(1 - r()) / ratePerS) * 1000;
    if (t >= seconds * 1000) break;
    out.push({ at: t, entry: Math.floor(r() * entries) });
  }
  return out;
}

interface Outcome {
  i: number;
  status: number | null;
  ttft?: number;
  total?: number;
  complete: boolean;
  error?: string;
  lagMs: number;
  where?: string;
  route?: string;
  queuedMs?: number;
}

const clientAgent = new Agent({ keepAliveTimeout: 30_000, headersTimeout: REQUEST_DEADLINE_MS, bodyTimeout: REQUEST_DEADLINE_MS, connections: 512 });

/** One streamed request; times are counted from `due` (its scheduled time, performance.now() clock). */
async function send(url: string, body: string, due: number, onFirst?: (at: number) => void): Promise<Omit<Outcome, 'i' | 'lagMs'>> {
  try {
    const res = await request(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
      dispatcher: clientAgent,
      signal: AbortSignal.timeout(REQUEST_DEADLINE_MS),
    });
    const h = res.headers;
    const meta = {
      where: h['x-viiwork-node'] as string | undefined,
      route: h['x-viiwork-route'] as string | undefined,
      queuedMs: h['x-viiwork-queued-ms'] !== undefined ? Number(h['x-viiwork-queued-ms']) : undefined,
    };
    if (res.statusCode !== 200) {
      const text = await res.body.text().catch(() => '');
      return { status: res.statusCode, complete: true, error: text.slice(0, 200), ...meta };
    }
    let ttft: number | undefined;
    let seen = '';
    for await (const chunk of res.body) {
      const s = (chunk as Buffer).toString('utf8');
      if (ttft === undefined && s.includes('"content"')) {
        const at = performance.now();
        ttft = at - due;
        onFirst?.(at);
      }
      seen = (seen + s).slice(-64);
    }
    const complete = seen.includes('[DONE]');
    return { status: 200, ttft, total: performance.now() - due, complete, error: complete ? undefined : 'stream ended without [DONE]', ...meta };
  } catch (err) {
    const e = err as { code?: string; name?: string; message?: string };
    return { status: null, complete: false, error: `${e.code ?? e.name}: ${e.message ?? ''}`.slice(0, 200) };
  }
}

/**
 * The client-side oracle. For each engine it keeps what it sent there and
 * has not seen finish, in send order (the engine's FIFO order), with the
 * time its first token arrived when it did. At each decision it replays the
 * engine's FIFO from that true state: a request whose first token came
 * started at (that time − first-token delay); one still waiting starts when
 * the earliest slot frees, and no earlier than would put its first token
 * in the past. The new request goes where its own first token comes
 * soonest (ties: the faster engine).
 */
class Oracle {
  readonly open = ENGINES.map(() => [] as { sentAt: number; firstAt?: number }[]);
  /** Predicted [wait for a slot, first-token delay] of a request sent to engine k now. */
  predict(k: number, now: number): [number, number] {
    const e = ENGINES[k];
    const slots = Array.from({ length: e.slots }, () => -Infinity);
    for (const r of this.open[k]) {
      slots.sort((a, b) => a - b);
      const start = r.firstAt !== undefined ? r.firstAt - e.firstMs : Math.max(r.sentAt, slots[0], now - e.firstMs);
      slots[0] = start + e.firstMs + SERVICE_TAIL_MS;
    }
    slots.sort((a, b) => a - b);
    return [Math.max(now, slots[0]) - now, e.firstMs];
  }
  /** waitWeight 1: where the first token comes soonest (greedy); more: queues count more. */
  pick(now: number, waitWeight: number): { engine: number; entry: { sentAt: number; firstAt?: number } } {
    let best = 0;
    let bestTtft = Infinity;
    for (let k = 0; k < ENGINES.length; k++) {
      const [wait, first] = this.predict(k, now);
      const t = waitWeight * wait + first;
      if (t < bestTtft) {
        bestTtft = t;
        best = k;
      }
    }
    const entry = { sentAt: now };
    this.open[best].push(entry);
    return { engine: best, entry };
  }
  done(k: number, entry: object): void {
    const i = this.open[k].indexOf(entry as never);
    if (i >= 0) this.open[k].splice(i, 1);
  }
}

function pct(sorted: number[], p: number): number | null {
  if (!sorted.length) return null;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}
const r1 = (x: number | null | undefined) => (x === null || x === undefined || !Number.isFinite(x) ? null : Math.round(x * 10) / 10);

interface ArmContext {
  nodes: BenchNode[];
  nginx?: string;
  engineUrls: string[];
}

async function runArm(arm: Arm, trace: Arrival[], ctx: ArmContext, label: string): Promise<Outcome[]> {
  const body = JSON.stringify({ model: 'm', stream: true, max_tokens: 8, messages: [{ role: 'user', content: 'Say hello.' }] });
  const oracle = new Oracle();
  let rr = 0;
  const pending: Promise<void>[] = [];
  const outcomes: Outcome[] = [];
  const t0 = performance.now() + 50;
  for (let i = 0; i < trace.length; i++) {
    const due = t0 + trace[i].at;
    const wait = due - performance.now();
    if (wait > 1) await sleep(wait - 0.5);
    while (performance.now() < due) {
      // busy-wait the last half millisecond
    }
    const lagMs = performance.now() - due;
    let url: string;
    let engine: number | undefined;
    let seen: { sentAt: number; firstAt?: number } | undefined;
    if (arm === 'viiwork') url = `${ctx.nodes[trace[i].entry].url}/v1/chat/completions`;
    else if (arm === 'least_conn') url = `http://${ctx.nginx}/v1/chat/completions`;
    else if (arm === 'oracle' || arm === 'greedy') {
      const p = oracle.pick(performance.now(), arm === 'oracle' ? ORACLE_WAIT_WEIGHT : 1);
      engine = p.engine;
      seen = p.entry;
    } else engine = rr++ % ENGINES.length;
    if (engine !== undefined) url = `${ctx.engineUrls[engine]}/v1/chat/completions`;
    const idx = i;
    pending.push(
      send(url!, body, due, seen && ((at) => (seen!.firstAt = at))).then((o) => {
        if (engine !== undefined && seen) oracle.done(engine, seen);
        outcomes.push({ i: idx, lagMs, ...o, where: o.where ?? (engine !== undefined ? ENGINES[engine].name : undefined) });
      }),
    );
  }
  await Promise.all(pending);
  outcomes.sort((a, b) => a.i - b.i);
  const ok = outcomes.filter((o) => o.status === 200 && o.complete).length;
  console.log(`${label} ${arm}: ${trace.length} sent, ${ok} complete 200s`);
  return outcomes;
}

function summarise(outcomes: Outcome[]) {
  const ttfts = outcomes.filter((o) => o.status === 200 && o.complete && o.ttft !== undefined).map((o) => o.ttft!);
  ttfts.sort((a, b) => a - b);
  const statuses: Record<string, number> = {};
  for (const o of outcomes) if (o.status !== null && o.status !== 200) statuses[o.status] = (statuses[o.status] ?? 0) + 1;
  const lost = outcomes.filter((o) => o.status === null || (o.status === 200 && !o.complete)).length;
  const where: Record<string, number> = {};
  for (const o of outcomes) if (o.where) where[o.where] = (where[o.where] ?? 0) + 1;
  const routes: Record<string, number> = {};
  for (const o of outcomes) if (o.route) routes[o.route] = (routes[o.route] ?? 0) + 1;
  const queued = outcomes.filter((o) => o.queuedMs !== undefined).map((o) => o.queuedMs!);
  queued.sort((a, b) => a - b);
  const lags = outcomes.map((o) => o.lagMs).sort((a, b) => a - b);
  const errors = [...new Set(outcomes.filter((o) => o.error).map((o) => `${o.status ?? 'no answer'}: ${o.error}`))].slice(0, 5);
  return {
    requests: outcomes.length,
    ok: ttfts.length,
    non_200: Object.values(statuses).reduce((a, b) => a + b, 0),
    statuses,
    lost,
    ttft_mean_ms: r1(ttfts.reduce((a, b) => a + b, 0) / (ttfts.length || NaN)),
    ttft_p50_ms: r1(pct(ttfts, 50)),
    ttft_p95_ms: r1(pct(ttfts, 95)),
    ttft_p99_ms: r1(pct(ttfts, 99)),
    ttft_max_ms: r1(ttfts[ttfts.length - 1]),
    ran_on: where,
    ...(Object.keys(routes).length ? { viiwork_routes: routes } : {}),
    ...(queued.length ? { viiwork_queued_ms: { waited: queued.filter((q) => q > 0).length, mean: r1(queued.reduce((a, b) => a + b, 0) / queued.length), p95: r1(pct(queued, 95)), max: r1(queued[queued.length - 1]) } } : {}),
    send_lag_ms: { p99: r1(pct(lags, 99)), max: r1(lags[lags.length - 1]) },
    errors,
  };
}

async function engineStats(urls: string[]) {
  return Promise.all(urls.map((u) => getJson<{ busy: number; queued: number; served: number; max_queued: number; queue_wait_mean_ms: number; queue_wait_max_ms: number }>(`${u}/stats`)));
}

async function resetEngines(urls: string[]) {
  await until(async () => (await engineStats(urls)).every((s) => s.busy === 0 && s.queued === 0), 'engines idle', 60_000, 100);
  await Promise.all(urls.map((u) => getJson(`${u}/stats/reset`)));
}

export async function benchRouting(): Promise<Record<string, unknown>> {
  const loads = (process.env.ROUTING_LOADS ?? '0.5:30,0.8:60').split(',').map((s) => {
    const [l, secs] = s.split(':').map(Number);
    return { load: l, seconds: secs };
  });
  const wanted = new Set((process.env.ROUTING_ARMS ?? DEFAULT_ARMS.join(',')).split(','));
  const seed = Number(process.env.ROUTING_SEED ?? 1);
  const warmupS = Number(process.env.ROUTING_WARMUP_S ?? 10);
  const drainOn = process.env.ROUTING_DRAIN !== '0';
  const drainRounds = Number(process.env.ROUTING_DRAIN_ROUNDS ?? 2);
  const segments = Number(process.env.ROUTING_SEGMENTS ?? 3);
  // Before each arm's segment, wait up to this long for other processes to use under 30% of a core.
  const quietBudget = Number(process.env.ROUTING_QUIET_MS ?? 5000);
  const machine = machineInfo();
  const skipped: { arm: string; reason: string }[] = [];
  const settings = {
    engines: ENGINES.map((e) => ({ name: e.name, slots: e.slots, first_token_ms: e.firstMs, then: `${TOKENS} tokens ${TOKEN_MS} ms apart` })),
    capacity_req_per_s: Math.round(CAPACITY * 100) / 100,
    loads: loads.map((l) => ({ ...l, rate_req_per_s: Math.round(l.load * CAPACITY * 100) / 100 })),
    seed,
    segments,
    oracle_wait_weight: ORACLE_WAIT_WEIGHT,
    viiwork_warmup_s: warmupS,
    request: 'streamed chat completion, ~90-byte body, 6 tokens out',
    viiwork_config: 'defaults (capacity_poll 1s, stale_after 3s, queue_timeout 20s), parallel 2 per node',
    ttft: 'client-side, from the scheduled send time to the first content chunk',
  };
  const dir = scratchDir('viiwork-routing-');
  const results: Record<string, unknown>[] = [];
  let drain: Record<string, unknown> | undefined;
  try {
    const engineUrls = ENGINES.map((e) => `http://127.0.0.1:${e.port}`);
    ENGINES.forEach((e) => startProc(e.name, process.execPath, [path.join(HERE, 'fakes/slot-engine.mjs'), '127.0.0.1', String(e.port), String(e.slots), String(e.firstMs), String(TOKENS), String(TOKEN_MS)], { dir }));
    await until(async () => (await engineStats(engineUrls)).length === 3, 'engines up', 10_000);

    const ctx: ArmContext = { nodes: [], engineUrls };
    const routingProcs: Proc[] = [];
    if (wanted.has('viiwork')) {
      try {
        for (let k = 0; k < 3; k++) {
          const n = await startViiwork(
            {
              name: `n${k + 1}`,
              ip: `127.0.0.${k + 1}`,
              apiPort: API_PORT,
              gossipPort: GOSSIP_PORT,
              seeds: k === 0 ? [] : [`127.0.0.1:${GOSSIP_PORT}`],
              models: [{ name: 'm', engine: 'openai', url: engineUrls[k], parallel: ENGINES[k].slots }],
            },
            dir,
          );
          ctx.nodes.push(n);
          routingProcs.push(n.proc);
        }
        await waitConverged(ctx.nodes);
        for (const n of ctx.nodes) await waitFleet(n, 'm', ['n1', 'n2', 'n3']);
        if (warmupS > 0) {
          // Lets every node measure its engine and publish a score; not measured.
          await runArm('viiwork', poissonTrace(0.5 * CAPACITY, warmupS, seed + 1000), ctx, 'warm-up');
          await resetEngines(engineUrls);
        }
      } catch (err) {
        skipped.push({ arm: 'viiwork', reason: String((err as Error).message).slice(0, 1500) });
        wanted.delete('viiwork');
      }
    }
    if (wanted.has('least_conn')) {
      if (!which('nginx')) {
        skipped.push({ arm: 'least_conn', reason: 'nginx is not installed (apt-get install nginx-light)' });
        wanted.delete('least_conn');
      } else {
        try {
          const ndir = path.join(dir, 'nginx');
          fs.mkdirSync(ndir);
          routingProcs.push(await startNginx('nginx', { dir: ndir, listen: NGINX_LISTEN, upstreams: ENGINES.map((e) => `127.0.0.1:${e.port}`), balance: 'least_conn;' }));
          ctx.nginx = NGINX_LISTEN;
        } catch (err) {
          skipped.push({ arm: 'least_conn', reason: String((err as Error).message).slice(0, 800) });
          wanted.delete('least_conn');
        }
      }
    }

    for (const { load, seconds } of loads) {
      // The trace is cut into segments; every arm runs segment 1, then every arm segment 2, ...:
      // a disturbance of the shared machine then falls on all arms rather than on one.
      const segs = Array.from({ length: segments }, (_, j) => poissonTrace(load * CAPACITY, seconds / segments, seed + j));
      const acc = new Map<Arm, { outcomes: Outcome[]; cpu: Record<string, number>; foreignMs: number; wallMs: number; queues: Record<string, { served: number; max_queued: number; wait_sum_ms: number; wait_max_ms: number }> }>();
      for (let j = 0; j < segments; j++) {
        for (const arm of ARMS) {
          if (!wanted.has(arm)) continue;
          await resetEngines(engineUrls);
          await waitQuiet(livePids().map((p) => p.pid), 0.3, quietBudget);
          const a = acc.get(arm) ?? { outcomes: [], cpu: {}, foreignMs: 0, wallMs: 0, queues: {} };
          acc.set(arm, a);
          const ours = livePids();
          const cpu0 = { busy: machineBusyMs(), groups: groupCpuMs(ours.map((p) => p.pid)), self: process.cpuUsage(), at: performance.now() };
          const outcomes = await runArm(arm, segs[j], ctx, `load ${Math.round(load * 100)}% segment ${j + 1}/${segments}`);
          const groups1 = groupCpuMs(ours.map((p) => p.pid));
          const selfUs = process.cpuUsage(cpu0.self);
          let oursMs = (selfUs.user + selfUs.system) / 1000;
          a.cpu.load_generator = (a.cpu.load_generator ?? 0) + oursMs;
          for (const p of ours) {
            const d = groups1.get(p.pid)! - cpu0.groups.get(p.pid)!;
            oursMs += d;
            a.cpu[p.name] = (a.cpu[p.name] ?? 0) + d;
          }
          a.wallMs += performance.now() - cpu0.at;
          a.foreignMs += Math.max(0, machineBusyMs() - cpu0.busy - oursMs);
          const offset = a.outcomes.length;
          a.outcomes.push(...outcomes.map((o) => ({ ...o, i: o.i + offset })));
          const stats = await engineStats(engineUrls);
          stats.forEach((st, k) => {
            const q = (a.queues[ENGINES[k].name] ??= { served: 0, max_queued: 0, wait_sum_ms: 0, wait_max_ms: 0 });
            q.served += st.served;
            q.max_queued = Math.max(q.max_queued, st.max_queued);
            q.wait_sum_ms += st.queue_wait_mean_ms * st.served;
            q.wait_max_ms = Math.max(q.wait_max_ms, st.queue_wait_max_ms);
          });
        }
      }
      const byArm: Record<string, Record<string, unknown>> = {};
      for (const [arm, a] of acc) {
        byArm[arm] = {
          ...summarise(a.outcomes),
          // CPU ms per request of each process (the load generator is this benchmark process).
          cpu_ms_per_req: Object.fromEntries(Object.entries(a.cpu).map(([k, v]) => [k, Math.round((v / a.outcomes.length) * 100) / 100])),
          // Other work on the machine during the arm (share of one core): the machine is shared, this says how much.
          foreign_cpu_share: Math.round((a.foreignMs / a.wallMs) * 100) / 100,
          // Where requests waited inside the engines (nginx and the client-side arms queue there; viiwork keeps them in its own queue).
          engine_queues: Object.fromEntries(Object.entries(a.queues).map(([k, q]) => [k, { served: q.served, max_queued: q.max_queued, wait_mean_ms: r1(q.served ? q.wait_sum_ms / q.served : 0), wait_max_ms: r1(q.wait_max_ms) }])),
        };
      }
      const ratio = (arm: string, base: string) => {
        const x = byArm[arm]?.ttft_mean_ms as number | undefined;
        const y = byArm[base]?.ttft_mean_ms as number | undefined;
        return x && y ? Math.round((x / y) * 100) / 100 : null;
      };
      const arms = Object.entries(byArm).map(([arm, st]) => ({ arm, ...st, mean_vs_oracle: ratio(arm, 'oracle'), mean_vs_least_conn: ratio(arm, 'least_conn') }));
      results.push({ load, seconds, segments, rate_req_per_s: Math.round(load * CAPACITY * 100) / 100, arrivals: segs.reduce((x, t) => x + t.length, 0), arms });
    }

    if (drainOn) {
      for (const p of routingProcs) await stopProc(p);
      drain = await drainExperiment(dir, drainRounds).catch((err) => ({ skipped: String((err as Error).message).slice(0, 1500) }));
    }
  } finally {
    await stopAllProcs();
  }
  const targets = checkTargets(results, drain);
  fs.rmSync(dir, { recursive: true, force: true });
  return { ...machine, settings, skipped, results, drain, targets };
}

/** 40 one-second requests at once over 8 slots of one node: through a gateway without the model vs straight to the executor. */
async function drainExperiment(dir: string, rounds: number): Promise<Record<string, unknown>> {
  const N = 40;
  const SLOTS = 8;
  const FIRST = 950; // + 5 tokens × 10 ms = 1 s in a slot
  const port = 18804;
  const engineUrl = `http://127.0.0.1:${port}`;
  startProc('drain-engine', process.execPath, [path.join(HERE, 'fakes/slot-engine.mjs'), '127.0.0.1', String(port), String(SLOTS), String(FIRST), String(TOKENS), String(TOKEN_MS)], { dir });
  await until(async () => (await engineStats([engineUrl])).length === 1, 'drain engine up', 10_000);
  const exec = await startViiwork({ name: 'd-exec', ip: '127.0.0.4', apiPort: API_PORT, gossipPort: GOSSIP_PORT, models: [{ name: 'm', engine: 'openai', url: engineUrl, parallel: SLOTS }] }, dir);
  const gw = await startViiwork({ name: 'd-gateway', ip: '127.0.0.5', apiPort: API_PORT, gossipPort: GOSSIP_PORT, models: [], seeds: [`127.0.0.4:${GOSSIP_PORT}`] }, dir);
  await waitConverged([exec, gw]);
  await waitFleet(gw, 'm', ['d-exec']);
  const body = JSON.stringify({ model: 'm', stream: true, max_tokens: 8, messages: [{ role: 'user', content: 'One second, please.' }] });
  const runs: Record<string, unknown>[] = [];
  const once = async (via: 'gateway' | 'direct') => {
    await resetEngines([engineUrl]);
    // Let the gateway's view of the executor settle to idle before the burst.
    await until(
      async () => {
        const f = await getJson<{ models: { name: string; hosts: { node: string; fresh: boolean; busy: number }[] }[] }>(`${gw.url}/v1/fleet/capacity`);
        const h = f.models.find((m) => m.name === 'm')?.hosts.find((x) => x.node === 'd-exec');
        return h?.fresh && h.busy === 0;
      },
      'gateway sees the executor idle',
      15_000,
      100,
    );
    const url = `${via === 'gateway' ? gw.url : exec.url}/v1/chat/completions`;
    const t0 = performance.now();
    const outs = await Promise.all(Array.from({ length: N }, () => send(url, body, t0)));
    const seconds = Math.max(...outs.map((o) => o.total ?? performance.now() - t0)) / 1000;
    const ok = outs.filter((o) => o.status === 200 && o.complete).length;
    const statuses: Record<string, number> = {};
    for (const o of outs) statuses[String(o.status)] = (statuses[String(o.status)] ?? 0) + 1;
    const stats = (await engineStats([engineUrl]))[0];
    const run = { via, seconds: Math.round(seconds * 1000) / 1000, ok, statuses, engine_served: stats.served, engine_max_queued: stats.max_queued };
    console.log(`drain via ${via}: ${run.seconds} s, ${ok}/${N} ok`);
    runs.push(run);
  };
  for (let r = 0; r < rounds; r++) {
    await once('gateway');
    await once('direct');
  }
  const med = (via: string) => {
    const xs = runs.filter((r) => r.via === via).map((r) => r.seconds as number).sort((a, b) => a - b);
    return xs[Math.floor((xs.length - 1) / 2)];
  };
  const g = med('gateway');
  const d = med('direct');
  return {
    requests: N,
    slots: SLOTS,
    seconds_in_slot: (FIRST + TOKENS * TOKEN_MS) / 1000,
    ideal_s: (N / SLOTS) * ((FIRST + TOKENS * TOKEN_MS) / 1000),
    gateway_s: g,
    direct_s: d,
    gateway_vs_direct: Math.round((g / d) * 100) / 100,
    runs,
  };
}

function checkTargets(results: Record<string, any>[], drain: Record<string, any> | undefined) {
  const out: { target: string; measured: unknown; goal: string; met: boolean | null }[] = [];
  const at80 = results.find((r) => r.load === 0.8);
  const v = at80?.arms.find((a: any) => a.arm === 'viiwork');
  out.push({ target: 'viiwork at 80%: every request answered 200', measured: v ? `${v.ok}/${v.requests} (non-200 ${v.non_200}, lost ${v.lost})` : null, goal: 'all', met: v ? v.ok === v.requests : null });
  out.push({ target: 'viiwork at 80%: mean TTFT vs nginx least_conn', measured: v?.mean_vs_least_conn ?? null, goal: '≤ 1.30', met: v?.mean_vs_least_conn == null ? null : v.mean_vs_least_conn <= 1.3 });
  out.push({ target: 'drain: 40 × 1 s over 8 remote slots, gateway vs direct', measured: drain?.gateway_vs_direct ?? null, goal: '≤ 1.15', met: drain?.gateway_vs_direct == null ? null : drain.gateway_vs_direct <= 1.15 });
  return out;
}

export function printRouting(doc: Record<string, any>): void {
  for (const s of doc.skipped ?? []) console.log(`skipped ${s.arm}: ${s.reason}`);
  console.log(`capacity ${doc.settings.capacity_req_per_s} req/s`);
  const rows = [];
  for (const r of doc.results ?? []) {
    for (const a of r.arms) {
      rows.push({
        load: `${Math.round(r.load * 100)}% (${r.arrivals} in ${r.seconds}s)`,
        arm: a.arm,
        ok: a.ok,
        'non-200': a.non_200,
        lost: a.lost,
        'mean ms': a.ttft_mean_ms,
        'p50 ms': a.ttft_p50_ms,
        'p95 ms': a.ttft_p95_ms,
        'p99 ms': a.ttft_p99_ms,
        '÷oracle': a.mean_vs_oracle,
        '÷least_conn': a.mean_vs_least_conn,
        foreign: a.foreign_cpu_share,
      });
    }
  }
  console.table(rows);
  if (doc.drain) {
    if (doc.drain.skipped) console.log(`drain skipped: ${doc.drain.skipped}`);
    else console.log(`drain (40 × 1 s, 8 remote slots): gateway ${doc.drain.gateway_s} s, direct ${doc.drain.direct_s} s, ratio ${doc.drain.gateway_vs_direct} (ideal ${doc.drain.ideal_s} s)`);
  }
  for (const t of doc.targets ?? []) console.log(`${t.met === null ? 'n/a ' : t.met ? 'MET ' : 'MISS'}  ${t.target}: ${t.measured} (target ${t.goal})`);
  console.log(`machine: ${doc.cpus} × ${doc.cpu_model}, ${doc.node}, commit ${String(doc.git_commit).slice(0, 10)}${doc.git_src_dirty ? ' (+uncommitted src changes)' : ''}, load at start ${doc.loadavg_at_start}`);
}
