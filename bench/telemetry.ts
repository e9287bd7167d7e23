/**
 * `npm run bench -- telemetry` (issue 27): what history and tracing cost.
 *
 * 1. CPU of one node at 50 req/s (open loop, sim engine, streamed and whole
 *    answers alternating) with tracing off and with tracing on (sample 1,
 *    OTLP/HTTP protobuf to a sink in this process): the node's process
 *    group's CPU (utime + stime from /proc) over each 20 s window, three
 *    rounds interleaved. History is always on in both arms, so its own
 *    cost is measured in-process (2):
 * 2. History's per-request call and its 10 s step (9 model × host
 *    accumulators), in ns, and what they are at 50 req/s as a share of a core.
 * 3. A soak on a simulated clock: one hour (and then six) of 50 req/s into
 *    the history and the timeline book, heap used after a full GC every
 *    simulated ten minutes: bounded memory means it stops growing once
 *    the rings have lapped.
 * 4. With TELEMETRY_SOAK_S=3600, a soak on the real clock: one real node,
 *    tracing on (sample 1, to a sink here), 50 req/s for that long; the
 *    node's resident memory every minute (and its answered share), so
 *    memory that grows with time or traffic shows as a slope.
 */
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import v8 from 'node:v8';
import vm from 'node:vm';
import { request } from 'undici';
import { stringify } from 'yaml';
import { History, type RequestFacts } from '../src/history/store.ts';
import { Tracing } from '../src/telemetry/tracing.ts';
import { TimelineBook } from '../src/dispatch/timeline.ts';
import type { DecisionRecord } from '../src/dispatch/decisions.ts';
import type { Trace } from '../src/dispatch/trace.ts';
import { groupCpuMs, machineInfo, rssMiB, scratchDir, sleep, startProc, stopProc, until, waitQuiet, type Proc } from './lib/procs.ts';

const RATE = 50;
const WINDOW_MS = 20_000;
const ROUNDS = 6;
/** Each node's first requests run before the JIT has settled (CPU per request falls by a fifth over the first minute): not measured. */
const WARM_MS = 30_000;
const BIN = path.resolve('bin/viiwork.js');

interface Arm {
  name: 'off' | 'tracing';
  ip: string;
  proc?: Proc;
  cores: number[];
  answered: number;
}

function config(dir: string, arm: Arm, sink: string): string {
  const doc = {
    node: { name: `bench-${arm.name}`, state_dir: path.join(dir, arm.name) },
    api: { host: arm.ip, port: 8086 },
    mesh: { open: true, network: 'lan', mdns: false, advertise: arm.ip, port: 7946 },
    models: [{ name: 'chat-sim', engine: 'sim', parallel: 8, workloads: ['chat'], sim: { ttft_ms: 5, prefill_ms_per_1k: 1, tokens_per_s: 2000, output_tokens: 8 } }],
    ...(arm.name === 'tracing' ? { telemetry: { otlp_endpoint: sink, sample: 1 } } : {}),
  };
  const file = path.join(dir, `${arm.name}.yaml`);
  fs.writeFileSync(file, stringify(doc));
  return file;
}

/** `RATE` requests a second for `ms`, each sent on schedule whatever the others do. */
async function openLoop(url: string, ms: number): Promise<number> {
  let ok = 0;
  const pending: Promise<void>[] = [];
  const start = performance.now();
  for (let i = 0; performance.now() - start < ms; i++) {
    const due = start + (i * 1000) / RATE;
    const wait = due - performance.now();
    if (wait > 0) await sleep(wait);
    pending.push(
      request(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'chat-sim', stream: i % 2 === 0, messages: [{ role: 'user', content: `bench ${i % 7}` }] }) })
        .then(async (r) => {
          await r.body.text();
          if (r.statusCode === 200) ok++;
        })
        .catch(() => {}),
    );
  }
  await Promise.all(pending);
  return ok;
}

async function cpuOfNodes(): Promise<{ arms: { name: string; cores: number[]; median_cores: number; answered: number }[]; paired_diff_cores: number[]; median_diff_cores: number; spans_received: number; foreign_share: number[] }> {
  const dir = scratchDir('viiwork-bench-telemetry-');
  let spans = 0;
  const sinkServer = http.createServer((req, res) => {
    req.on('data', () => {});
    req.on('end', () => {
      spans++;
      res.writeHead(200, { 'content-type': 'application/x-protobuf' });
      res.end();
    });
  });
  await new Promise<void>((r) => sinkServer.listen(4318, '127.0.27.60', r));
  const sink = 'http://127.0.27.60:4318/v1/traces';
  const arms: Arm[] = [
    { name: 'off', ip: '127.0.27.61', cores: [], answered: 0 },
    { name: 'tracing', ip: '127.0.27.62', cores: [], answered: 0 },
  ];
  const foreign: number[] = [];
  try {
    for (const a of arms) {
      a.proc = startProc(a.name, process.execPath, [BIN, 'serve', '--config', config(dir, a, sink)], { dir });
      await until(async () => (await request(`http://${a.ip}:8086/health`).then((r) => (r.body.text(), r.statusCode)).catch(() => 0)) === 200, `${a.name} healthy`, 30_000, 200);
    }
    for (const a of arms) await openLoop(`http://${a.ip}:8086`, WARM_MS); // warm-up: JIT, connections, first scores
    for (let round = 0; round < ROUNDS; round++) {
      // off, on, then on, off: a drift over the run (the JIT, the machine) falls on both arms alike.
      for (const a of round % 2 === 0 ? arms : [...arms].reverse()) {
        foreign.push(await waitQuiet(arms.map((x) => x.proc!.pid), 0.15, 15_000));
        const c0 = groupCpuMs([a.proc!.pid]).get(a.proc!.pid)!;
        const t0 = performance.now();
        a.answered += await openLoop(`http://${a.ip}:8086`, WINDOW_MS);
        const c1 = groupCpuMs([a.proc!.pid]).get(a.proc!.pid)!;
        a.cores.push((c1 - c0) / (performance.now() - t0));
      }
    }
  } finally {
    for (const a of arms) if (a.proc) await stopProc(a.proc);
    sinkServer.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
  const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
  const round4 = (x: number) => Math.round(x * 10000) / 10000;
  // Each round's on − off, the two windows back to back: the figure the target is read from.
  const diffs = arms[1].cores.map((c, i) => c - arms[0].cores[i]);
  return { arms: arms.map((a) => ({ name: a.name, cores: a.cores.map(round4), median_cores: round4(median(a.cores)), answered: a.answered })), paired_diff_cores: diffs.map(round4), median_diff_cores: round4(median(diffs)), spans_received: spans, foreign_share: foreign.map((f) => Math.round(f * 100) / 100) };
}

const MODELS = ['m1', 'm2', 'm3'];
const HOSTS = ['a', 'b', 'c'];

function facts(i: number): RequestFacts {
  return { executor: HOSTS[i % 3], outcome: i % 50 === 0 ? '429' : '200', queuedMs: i % 4, startedAt: 0, firstContentAt: 50 + (i % 200), promptTokens: 200, cachedTokens: 120, completionTokens: 32, predictedCached: 100 };
}

function historyCost(): { request_ns: number; step_ns: number; share_of_core_at_50_rps: number } {
  const h = new History('a');
  const fs_ = Array.from({ length: 1000 }, (_, i) => facts(i));
  const t0 = 1_700_000_000_000;
  const n = 2_000_000;
  for (let i = 0; i < 100_000; i++) h.request(MODELS[i % 3], fs_[i % 1000], t0 + i); // warm
  let s = performance.now();
  for (let i = 0; i < n; i++) h.request(MODELS[i % 3], fs_[i % 1000], t0 + 200_000 + i * 5);
  const requestNs = ((performance.now() - s) * 1e6) / n;
  const steps = 2000;
  s = performance.now();
  for (let k = 0; k < steps; k++) h.advance(t0 + 20_000_000 + k * 10_000);
  const stepNs = ((performance.now() - s) * 1e6) / steps;
  // Per second: 50 calls, and a tenth of a step (plus the gauges, read from the routing snapshot, not counted here).
  const share = (RATE * requestNs + stepNs / 10) / 1e9;
  return { request_ns: Math.round(requestNs), step_ns: Math.round(stepNs), share_of_core_at_50_rps: Math.round(share * 1e6) / 1e6 };
}

/**
 * Tracing's own work per request in this process: the entry span at arrival and, at the end, its children
 * and the executor-side spans a forward makes, then the batch processor's protobuf export to a sink here
 * (process CPU, user + system, so the export's serialisation counts too).
 */
async function tracingCost(): Promise<{ requests: number; cpu_us_per_request: number; share_of_core_at_50_rps: number; exports: number }> {
  let exports = 0;
  const sink = http.createServer((req, res) => {
    req.on('data', () => {});
    req.on('end', () => (exports++, res.writeHead(200, { 'content-type': 'application/x-protobuf' }), res.end()));
  });
  await new Promise<void>((r) => sink.listen(4318, '127.0.27.63', r));
  const t = new Tracing({ endpoint: 'http://127.0.27.63:4318/v1/traces', sample: 1, node: 'bench', version: 'bench' });
  const n = 20_000;
  const run = (k: number) => {
    const startedAt = performance.now();
    const span = t.begin(k % 2 ? `00-${'ab'.repeat(16)}-${'cd'.repeat(8)}-01` : undefined, startedAt);
    const f = { executor: 'b', route: 'scored', outcome: '200', queuedMs: 0, startedAt, placedAt: startedAt + 0.1, forwardAt: startedAt + 0.2, firstContentAt: startedAt + 5, endedAt: startedAt + 9, span, cands: [{ host: 'a' }, { host: 'b' }] };
    t.finish(f, 'm1', 'chat', 'a');
    // The executor's side of the same request, as its node makes it.
    t.finish({ executor: 'b', route: 'forwarded', outcome: '200', queuedMs: 0, startedAt, grantedAt: startedAt, engineAt: startedAt + 0.1, firstContentAt: startedAt + 4, endedAt: startedAt + 8, promptTokens: 200, completionTokens: 32, cachedTokens: 120, parent: span.traceparent }, 'm1', 'chat', 'b');
  };
  for (let k = 0; k < 2000; k++) run(k);
  await sleep(1500);
  const c0 = process.cpuUsage();
  for (let k = 0; k < n; k++) {
    run(k);
    // 50 req/s would never fill the batch queue; here requests come in bursts of a batch, each followed by its export.
    if (k % 500 === 499) await sleep(1100);
  }
  await sleep(1500);
  const c = process.cpuUsage(c0);
  await t.stop();
  sink.close();
  // The sleeps cost no CPU; what was used is the spans' making and their export.
  const us = (c.user + c.system) / n;
  return { requests: n, cpu_us_per_request: Math.round(us * 10) / 10, share_of_core_at_50_rps: Math.round(((RATE * us) / 1e6) * 1e6) / 1e6, exports };
}

function soak(): { minutes: number; heap_mb: number; series: number }[] {
  v8.setFlagsFromString('--expose-gc');
  const gc = vm.runInNewContext('gc') as () => void;
  const h = new History('a');
  const book = new TimelineBook('a');
  const out: { minutes: number; heap_mb: number; series: number }[] = [];
  const t0 = 1_700_000_000_000;
  const perMinute = RATE * 60;
  for (let minute = 0; minute <= 7 * 60; minute++) {
    for (let i = 0; i < perMinute; i++) {
      const now = t0 + minute * 60_000 + (i * 60_000) / perMinute;
      const k = minute * perMinute + i;
      h.request(MODELS[k % 3], facts(k), now);
      // A trace and feed record per request, as the node makes them, kept by the book only while among the last 200.
      const trace = { executor: HOSTS[k % 3], route: 'scored', queuedMs: 0, startedAt: 0, endedAt: 80, outcome: '200', known: true, id: k } as Trace;
      book.add({ seq: k, at: now, entry: 'a', executor: trace.executor, model: 'm1', workload: 'chat', route: 'scored', queued_ms: 0, ttft_ms: 50, outcome: '200', timeline: `a:${k}` } as DecisionRecord, trace, 200);
      if (i % 500 === 0) for (const host of HOSTS) for (const m of MODELS) h.gauge('slots_busy', host, m, k % 4, now);
    }
    h.advance(t0 + (minute + 1) * 60_000);
    if (minute % 30 === 0) {
      gc();
      out.push({ minutes: minute, heap_mb: Math.round((process.memoryUsage().heapUsed / 2 ** 20) * 10) / 10, series: h.seriesCount });
    }
  }
  return out;
}

interface SoakPoint {
  minutes: number;
  rss_mb: number;
  answered: number;
  sent: number;
}

function rssMb(pid: number): number {
  const mib = rssMiB(pid);
  return mib === undefined ? NaN : Math.round(mib * 10) / 10;
}

/** One real node with tracing on at RATE req/s for `seconds`: its RSS every minute. */
async function realSoak(seconds: number): Promise<{ seconds: number; points: SoakPoint[]; spans_batches: number }> {
  const dir = scratchDir('viiwork-bench-soak-');
  let batches = 0;
  const sink = http.createServer((req, res) => {
    req.on('data', () => {});
    req.on('end', () => (batches++, res.writeHead(200, { 'content-type': 'application/x-protobuf' }), res.end()));
  });
  await new Promise<void>((r) => sink.listen(4318, '127.0.27.64', r));
  const arm: Arm = { name: 'tracing', ip: '127.0.27.65', cores: [], answered: 0 };
  const points: SoakPoint[] = [];
  try {
    arm.proc = startProc('soak', process.execPath, [BIN, 'serve', '--config', config(dir, arm, 'http://127.0.27.64:4318/v1/traces')], { dir });
    await until(async () => (await request(`http://${arm.ip}:8086/health`).then((r) => (r.body.text(), r.statusCode)).catch(() => 0)) === 200, 'soak node healthy', 30_000, 200);
    let answered = 0;
    let sent = 0;
    points.push({ minutes: 0, rss_mb: rssMb(arm.proc.pid), answered, sent });
    for (let minute = 1; minute * 60 <= seconds; minute++) {
      answered += await openLoop(`http://${arm.ip}:8086`, 60_000);
      sent += RATE * 60;
      points.push({ minutes: minute, rss_mb: rssMb(arm.proc.pid), answered, sent });
      if (process.env.TELEMETRY_SOAK_LOG) console.error(JSON.stringify(points[points.length - 1]));
    }
  } finally {
    if (arm.proc) await stopProc(arm.proc);
    sink.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
  return { seconds, points, spans_batches: batches };
}

export async function benchTelemetry() {
  const soakS = Number(process.env.TELEMETRY_SOAK_S ?? 0);
  if (soakS > 0) return { at: new Date().toISOString(), machine: machineInfo(), rate_rps: RATE, real_soak: await realSoak(soakS) };
  const history = historyCost();
  const tracing = await tracingCost();
  const memory = soak();
  const cpu = await cpuOfNodes();
  return { at: new Date().toISOString(), machine: machineInfo(), rate_rps: RATE, window_ms: WINDOW_MS, rounds: ROUNDS, history, tracing, cpu, memory };
}

export function printTelemetry(doc: Awaited<ReturnType<typeof benchTelemetry>>): void {
  if ('real_soak' in doc && doc.real_soak) {
    console.table(doc.real_soak.points);
    return;
  }
  console.log(`history: ${doc.history.request_ns} ns per request, ${doc.history.step_ns} ns per 10 s step → ${(doc.history.share_of_core_at_50_rps * 100).toFixed(4)}% of a core at ${doc.rate_rps} req/s`);
  console.log(`tracing: ${doc.tracing.cpu_us_per_request} µs of CPU per request (entry and executor spans, export included) → ${(doc.tracing.share_of_core_at_50_rps * 100).toFixed(3)}% of a core at ${doc.rate_rps} req/s (${doc.tracing.exports} exports)`);
  console.table(doc.cpu.arms.map((a) => ({ arm: a.name, cores: a.cores.join(' '), median: a.median_cores, answered: a.answered })));
  console.log(`tracing on − off, round by round: ${doc.cpu.paired_diff_cores.map((d) => (d * 100).toFixed(2)).join(' ')}% of a core; median ${(doc.cpu.median_diff_cores * 100).toFixed(2)}% (spans batches received: ${doc.cpu.spans_received}; foreign load ${doc.cpu.foreign_share.join(' ')})`);
  console.table(doc.memory);
}
