/**
 * Models on demand (issue 19, SPEC section 11): what loading where there is
 * room costs a user, against the ideal and against a layout pinned by hand.
 * Real `viiwork serve` processes (open mesh on loopback, 127.0.150-152.*)
 * with sim engines; requests are streamed chat completions over HTTP.
 *
 * 1. Cold start. An entry node with no models and a host with one on-demand
 *    sim model (`sim.load_ms` LIFECYCLE_COLD_LOAD_MS, 1500; first token
 *    after 200 ms). Per repetition: the host is told to unload and the
 *    entry must see it unloaded; one request enters the entry node (which
 *    places the load on the host and waits for it); its time to first
 *    token is set against load time + the TTFT of the same request once
 *    the model is loaded (mean of three warm requests right after). The
 *    load time is both the nominal `load_ms` and the time the host itself
 *    takes from an operator's `POST /v1/models/cold/load` to `loaded` in
 *    its own /v1/capacity (measured once per repetition, then unloaded
 *    again). The entry learns a remote load ended from a capacity poll, so
 *    the cold sends are spread evenly over one poll period (repetition k of
 *    n waits k/n of it after the entry saw the unload). Target: the ratio
 *    within 10% of 1.
 *
 * 2. Mixed trace. Five sim models, demand 40/25/15/12/8%, 1 GiB each,
 *    `parallel: 2`, loads of 1-3 s (1000 + 500·k ms), an answer of 16 tokens
 *    after 100 ms at 100 tok/s (≈ 260 ms in a slot); three nodes, each with
 *    `memory_budget: 2.5GiB` (room for two). Two arms, the same seeded
 *    trace:
 *      on_demand  every node has all five entries `load: on_demand`
 *                 (idle_unload 60 s, routing.scale_after
 *                 LIFECYCLE_SCALE_AFTER, the default 10s); nothing loaded at the start
 *      static     the best layout by hand (bench/lib/lifecycle-plan.ts):
 *                 six copies in the six places, the most popular model
 *                 twice, `load: always`, all loaded before the trace starts
 *    Closed loop: LIFECYCLE_CONCURRENCY (4) clients per entry node, all
 *    three nodes entries, each sending its next request as soon as the
 *    last ended (a 429/503 with Retry-After: after min(Retry-After, 1 s)).
 *    12 clients against 12 slots in all: a layout that puts the slots where
 *    the demand is completes more. Runs LIFECYCLE_WARMUP_S (15) + LIFECYCLE_MEASURE_S
 *    (40) seconds; throughput counts answers completed inside the measured
 *    window, mean TTFT those sent inside it; the on_demand arm's start-up
 *    loads fall in the warm-up (their cost is part 1's subject) and are
 *    also reported over the whole run. Every request has a 60 s deadline
 *    and ends as a 200, a 429/503 with Retry-After, or counts as lost.
 *    Target: on_demand ≥ 0.9 × static throughput.
 *
 * Env: LIFECYCLE_QUICK=1 (2 repetitions, 6 + 15 s), LIFECYCLE_PARTS
 * ("cold,mix"), LIFECYCLE_REPS (5), LIFECYCLE_COLD_LOAD_MS (1500),
 * LIFECYCLE_CONCURRENCY (4), LIFECYCLE_WARMUP_S, LIFECYCLE_MEASURE_S,
 * LIFECYCLE_SCALE_AFTER ("10s", routing.scale_after's default), LIFECYCLE_CAPACITY_POLL (every node's
 * mesh.capacity_poll; default theirs, 1 s), LIFECYCLE_SEED (1), LIFECYCLE_KEEP=1 (keep
 * the scratch dir); BENCH_OUT=DIR writes results there.
 */
import fs from 'node:fs';
import { Agent, request } from 'undici';
import { machineInfo, scratchDir, sleep, stopAllProcs, stopProc, until } from './lib/procs.ts';
import { mean, percentile, pick, seeded, staticLayout } from './lib/lifecycle-plan.ts';
import { getJson, startViiwork, waitConverged, type BenchNode } from './lib/viiwork.ts';

const API_PORT = 18950;
const GOSSIP_PORT = 18951;
const REQUEST_DEADLINE_MS = 60_000;
const GIB = 1024 ** 3;
/** LIFECYCLE_CAPACITY_POLL (say 250ms): how often entry nodes poll their members; a waiting request learns a remote load ended from a poll. */
const MESH_EXTRA: Record<string, unknown> = process.env.LIFECYCLE_CAPACITY_POLL ? { capacity_poll: process.env.LIFECYCLE_CAPACITY_POLL } : {};
const agent = new Agent({ keepAliveTimeout: 30_000, headersTimeout: REQUEST_DEADLINE_MS, bodyTimeout: REQUEST_DEADLINE_MS, connections: 256 });

export const MIX = [
  { model: 'm1', share: 0.4 },
  { model: 'm2', share: 0.25 },
  { model: 'm3', share: 0.15 },
  { model: 'm4', share: 0.12 },
  { model: 'm5', share: 0.08 },
];
const SIM = { ttft_ms: 100, prefill_ms_per_1k: 0, tokens_per_s: 100, output_tokens: 16, cache: false };

interface Outcome {
  model: string;
  entry: string;
  status: number | null;
  complete: boolean;
  ttft?: number;
  /** ms after the arm's start it was sent and ended */
  sentAt: number;
  endedAt: number;
  retryAfter?: string;
  node?: string;
  error?: string;
}

const r1 = (x: number) => Math.round(x * 10) / 10;
const r2 = (x: number) => Math.round(x * 100) / 100;

/** "250ms", "1s", "1.5s" or a number of ms: the bench's own reading of the capacity_poll it sets. */
function durationMs(text: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s)?$/.exec(text.trim());
  if (!m) throw new Error(`LIFECYCLE_CAPACITY_POLL: expected a duration such as 250ms or 1s, got "${text}"`);
  return Number(m[1]) * (m[2] === 's' ? 1000 : 1);
}

/** One streamed chat request: its status, TTFT (to the first content chunk) and whether it ended with [DONE]. */
async function chat(url: string, model: string): Promise<{ status: number | null; complete: boolean; ttft?: number; retryAfter?: string; node?: string; error?: string; ms: number }> {
  const t0 = performance.now();
  const body = JSON.stringify({ model, stream: true, max_tokens: 16, messages: [{ role: 'user', content: `Say something, ${model}.` }] });
  try {
    const res = await request(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body, dispatcher: agent, signal: AbortSignal.timeout(REQUEST_DEADLINE_MS) });
    const node = res.headers['x-viiwork-node'] as string | undefined;
    if (res.statusCode !== 200) {
      const text = await res.body.text().catch(() => '');
      return { status: res.statusCode, complete: true, retryAfter: res.headers['retry-after'] as string | undefined, node, error: text.slice(0, 300), ms: performance.now() - t0 };
    }
    let ttft: number | undefined;
    let tail = '';
    for await (const chunk of res.body) {
      const s = (chunk as Buffer).toString('utf8');
      if (ttft === undefined && s.includes('"content"')) ttft = performance.now() - t0;
      tail = (tail + s).slice(-64);
    }
    return { status: 200, complete: tail.includes('[DONE]'), ttft, node, ms: performance.now() - t0 };
  } catch (err) {
    return { status: null, complete: false, error: String((err as Error).message ?? err).slice(0, 300), ms: performance.now() - t0 };
  }
}

async function post(url: string): Promise<{ status: number; body: string }> {
  const r = await request(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ reason: 'operator', detail: 'lifecycle benchmark' }), dispatcher: agent });
  return { status: r.statusCode, body: await r.body.text() };
}

/** A model's state in a node's own /v1/capacity. */
async function localState(n: BenchNode, model: string): Promise<string | undefined> {
  const cap = await getJson<{ models: { name: string; targets: { state?: string }[] }[] }>(`${n.url}/v1/capacity`);
  return cap.models.find((m) => m.name === model)?.targets[0]?.state;
}

/** A model's state on `host` as `from` sees it (fresh reports only). */
async function fleetState(from: BenchNode, model: string, host: string): Promise<string | undefined> {
  const f = await getJson<{ models: { name: string; hosts: { node: string; fresh: boolean; state?: string }[] }[] }>(`${from.url}/v1/fleet/capacity`);
  const h = f.models.find((m) => m.name === model)?.hosts.find((x) => x.node === host && x.fresh);
  return h?.state;
}

/** Unload `model` on `host` and wait until both the host and the entry see it unloaded. */
async function unloadAndSettle(host: BenchNode, entry: BenchNode, model: string): Promise<void> {
  await until(async () => (await post(`${host.url}/v1/models/${model}/unload`)).status === 200, `${host.name} accepts the unload of ${model}`, 20_000, 100);
  await until(async () => (await localState(host, model)) === 'unloaded', `${model} unloaded on ${host.name}`, 20_000, 20);
  await until(async () => (await fleetState(entry, model, host.name)) === 'unloaded', `${entry.name} sees ${model} unloaded on ${host.name}`, 20_000, 20);
}

async function benchCold(dir: string, reps: number, loadMs: number, pollMs: number): Promise<Record<string, any>> {
  const ttftMs = 200;
  const model = 'cold';
  const hostNode = await startViiwork(
    {
      name: 'lc-host',
      ip: '127.0.150.2',
      apiPort: API_PORT,
      gossipPort: GOSSIP_PORT,
      mesh: MESH_EXTRA,
      node: { memory_budget: '4GiB' },
      routing: { load_wait: '60s' },
      models: [{ name: model, engine: 'sim', parallel: 2, load: 'on_demand', idle_unload: '0', memory: '1GiB', sim: { ttft_ms: ttftMs, prefill_ms_per_1k: 0, tokens_per_s: 100, output_tokens: 8, load_ms: loadMs, cache: false } }],
    },
    dir,
  );
  const entry = await startViiwork({ name: 'lc-entry', ip: '127.0.150.1', apiPort: API_PORT, gossipPort: GOSSIP_PORT, seeds: [`127.0.150.2:${GOSSIP_PORT}`], mesh: MESH_EXTRA, routing: { load_wait: '60s' } }, dir);
  const rows: Record<string, any>[] = [];
  try {
    await waitConverged([hostNode, entry]);
    await until(async () => (await fleetState(entry, model, hostNode.name)) === 'unloaded', `${entry.name} sees ${model} available on ${hostNode.name}`, 30_000, 50);
    for (let k = 0; k < reps; k++) {
      // The host's own load time, from an operator's ask to `loaded` in its capacity report.
      const t0 = performance.now();
      const asked = await post(`${hostNode.url}/v1/models/${model}/load`);
      if (asked.status !== 200 && asked.status !== 202) throw new Error(`load of ${model} on ${hostNode.name}: ${asked.status} ${asked.body}`);
      await until(async () => (await localState(hostNode, model)) === 'loaded', `${model} loaded on ${hostNode.name}`, 30_000, 10);
      const hostLoadMs = performance.now() - t0;
      await unloadAndSettle(hostNode, entry, model);
      // The entry learns the load ended from its next capacity poll of the host, and it has just seen the unload in
      // one: sent now, every repetition would meet the same poll phase. Spread the sends evenly over one poll period.
      const offsetMs = Math.round((k / reps) * pollMs);
      await sleep(offsetMs);
      const cold = await chat(entry.url, model);
      if (cold.status !== 200 || cold.ttft === undefined) throw new Error(`cold request: ${cold.status} ${cold.error ?? ''}`);
      const warm: number[] = [];
      for (let w = 0; w < 3; w++) {
        const r = await chat(entry.url, model);
        if (r.status !== 200 || r.ttft === undefined) throw new Error(`warm request: ${r.status} ${r.error ?? ''}`);
        warm.push(r.ttft);
      }
      const warmMean = warm.reduce((a, b) => a + b, 0) / warm.length;
      const row = {
        rep: k + 1,
        offset_ms: offsetMs,
        cold_ttft_ms: r1(cold.ttft),
        warm_ttft_ms: r1(warmMean),
        host_load_ms: r1(hostLoadMs),
        vs_nominal: r2(cold.ttft / (loadMs + warmMean)),
        vs_measured: r2(cold.ttft / (hostLoadMs + warmMean)),
        ran_on: cold.node,
      };
      console.log(`cold start ${k + 1}/${reps}: first token ${row.cold_ttft_ms} ms; load ${loadMs} ms nominal, ${row.host_load_ms} ms on the host; warm TTFT ${row.warm_ttft_ms} ms; ratio ${row.vs_nominal} (nominal), ${row.vs_measured} (measured)`);
      rows.push(row);
      await unloadAndSettle(hostNode, entry, model);
    }
  } finally {
    await stopProc(entry.proc);
    await stopProc(hostNode.proc);
  }
  const med = (f: string) => {
    const xs = rows.map((r) => r[f] as number).sort((a, b) => a - b);
    return xs.length ? xs[Math.floor((xs.length - 1) / 2)] : null;
  };
  return {
    load_ms: loadMs,
    engine_ttft_ms: ttftMs,
    repetitions: rows,
    median_cold_ttft_ms: med('cold_ttft_ms'),
    median_warm_ttft_ms: med('warm_ttft_ms'),
    median_host_load_ms: med('host_load_ms'),
    median_vs_nominal: med('vs_nominal'),
    median_vs_measured: med('vs_measured'),
    // Over poll phases spread evenly, the mean is what a request arriving at a random moment can expect.
    mean_vs_nominal: rows.length ? r2(rows.reduce((a, r) => a + r.cold_ttft_ms, 0) / rows.reduce((a, r) => a + loadMs + r.warm_ttft_ms, 0)) : null,
    mean_vs_measured: rows.length ? r2(rows.reduce((a, r) => a + r.cold_ttft_ms, 0) / rows.reduce((a, r) => a + r.host_load_ms + r.warm_ttft_ms, 0)) : null,
  };
}

function simEntry(model: string, load: 'always' | 'on_demand') {
  const k = MIX.findIndex((m) => m.model === model);
  return {
    name: model,
    engine: 'sim',
    parallel: 2,
    load,
    memory: '1GiB',
    ...(load === 'on_demand' ? { idle_unload: '60s' } : {}),
    sim: { ...SIM, load_ms: 1000 + 500 * k },
  };
}

/** Sum of a counter's samples by its `reason` label in Prometheus text. */
function countersByReason(text: string, name: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    const reason = /reason="([^"]*)"/.exec(line)?.[1] ?? '';
    out[reason] = (out[reason] ?? 0) + Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return out;
}

async function runMixArm(arm: 'on_demand' | 'static', dir: string, o: { ipBlock: number; layout: Record<string, string[]>; concurrency: number; warmupS: number; measureS: number; seed: number; scaleAfter: string }): Promise<Record<string, any>> {
  const names = Object.keys(o.layout);
  const nodes: BenchNode[] = [];
  for (let i = 0; i < names.length; i++) {
    const ip = `127.0.${o.ipBlock}.${i + 1}`;
    nodes.push(
      await startViiwork(
        {
          name: names[i],
          ip,
          apiPort: API_PORT,
          gossipPort: GOSSIP_PORT,
          seeds: i ? [`127.0.${o.ipBlock}.1:${GOSSIP_PORT}`] : [],
          mesh: MESH_EXTRA,
          node: { memory_budget: '2.5GiB' },
          routing: { load_wait: '45s', queue_timeout: '45s', scale_after: o.scaleAfter },
          models: arm === 'static' ? o.layout[names[i]].map((m) => simEntry(m, 'always')) : MIX.map((m) => simEntry(m.model, 'on_demand')),
        },
        dir,
      ),
    );
  }
  try {
    await waitConverged(nodes);
    // Every entry node sees every model where it should: loaded by hand, or available everywhere.
    for (const n of nodes)
      for (const { model } of MIX) {
        const hosts = arm === 'static' ? names.filter((h) => o.layout[h].includes(model)) : names;
        await until(
          async () => {
            for (const h of hosts) if ((await fleetState(n, model, h)) !== (arm === 'static' ? 'loaded' : 'unloaded')) return false;
            return true;
          },
          `${n.name} sees ${model} ${arm === 'static' ? 'loaded' : 'available'} on ${hosts.join(', ')}`,
          30_000,
          100,
        );
      }
    const outcomes: Outcome[] = [];
    const start = performance.now();
    const endAt = start + (o.warmupS + o.measureS) * 1000;
    const worker = async (entry: BenchNode, w: number) => {
      const rand = seeded(o.seed * 1000 + nodes.indexOf(entry) * 100 + w);
      while (performance.now() < endAt) {
        const model = pick(MIX, rand());
        const sentAt = performance.now() - start;
        const r = await chat(entry.url, model);
        const endedAt = performance.now() - start;
        outcomes.push({ model, entry: entry.name, status: r.status, complete: r.complete, ttft: r.ttft, sentAt, endedAt, retryAfter: r.retryAfter, node: r.node, error: r.error });
        if (r.status !== 200) await sleep(r.retryAfter ? Math.min(1000, Number(r.retryAfter) * 1000) : 200);
      }
    };
    await Promise.all(nodes.flatMap((n) => Array.from({ length: o.concurrency }, (_, w) => worker(n, w))));
    const wallS = (performance.now() - start) / 1000;
    const w0 = o.warmupS * 1000;
    const w1 = w0 + o.measureS * 1000;
    const ok = (x: Outcome) => x.status === 200 && x.complete;
    const shed = (x: Outcome) => (x.status === 429 || x.status === 503) && Number(x.retryAfter) > 0;
    const inWindow = outcomes.filter((x) => x.endedAt >= w0 && x.endedAt < w1);
    const sentInWindow = outcomes.filter((x) => x.sentAt >= w0 && x.sentAt < w1 && ok(x));
    const ttfts = sentInWindow.map((x) => x.ttft!).filter((t) => t !== undefined);
    const allTtfts = outcomes.filter(ok).map((x) => x.ttft!).filter((t) => t !== undefined);
    const lost = outcomes.filter((x) => !ok(x) && !shed(x));
    const perModel = Object.fromEntries(
      MIX.map(({ model }) => {
        const xs = sentInWindow.filter((x) => x.model === model);
        return [model, { ok: xs.length, ttft_mean_ms: mean(xs.map((x) => x.ttft!).filter((t) => t !== undefined)) }];
      }),
    );
    // Where the models ended up, and how many loads and unloads it took.
    const placement: Record<string, string[]> = {};
    const loads: Record<string, number> = {};
    const unloads: Record<string, number> = {};
    for (const n of nodes) {
      const cap = await getJson<{ models: { name: string; targets: { state?: string }[] }[] }>(`${n.url}/v1/capacity`);
      placement[n.name] = cap.models.filter((m) => m.targets.some((t) => t.state === 'loaded' || t.state === 'loading')).map((m) => m.name);
      const r = await request(`${n.url}/metrics`, { dispatcher: agent });
      const text = await r.body.text();
      for (const [k, v] of Object.entries(countersByReason(text, 'viiwork_model_loads_total'))) loads[k] = (loads[k] ?? 0) + v;
      for (const [k, v] of Object.entries(countersByReason(text, 'viiwork_model_unloads_total'))) unloads[k] = (unloads[k] ?? 0) + v;
    }
    const statuses: Record<string, number> = {};
    for (const x of outcomes) statuses[String(x.status)] = (statuses[String(x.status)] ?? 0) + 1;
    const res = {
      arm,
      requests: outcomes.length,
      statuses,
      shed_with_retry_after: outcomes.filter(shed).length,
      lost: lost.length,
      lost_examples: lost.slice(0, 3).map((x) => `${x.status} ${x.error ?? 'incomplete'}`),
      measured_s: o.measureS,
      throughput_req_per_s: r2(inWindow.filter(ok).length / o.measureS),
      ttft_mean_ms: mean(ttfts),
      ttft_p50_ms: percentile(ttfts, 50),
      ttft_p95_ms: percentile(ttfts, 95),
      whole_run: { seconds: r1(wallS), throughput_req_per_s: r2(outcomes.filter(ok).length / wallS), ttft_mean_ms: mean(allTtfts), ttft_p95_ms: percentile(allTtfts, 95) },
      per_model: perModel,
      placement_at_end: placement,
      loads_by_reason: loads,
      unloads_by_reason: unloads,
    };
    console.log(`${arm}: ${res.throughput_req_per_s} req/s, mean TTFT ${res.ttft_mean_ms} ms (p95 ${res.ttft_p95_ms}); ${res.requests} requests ${JSON.stringify(statuses)}, ${res.lost} lost; at the end ${JSON.stringify(placement)}`);
    return res;
  } finally {
    for (const n of nodes) await stopProc(n.proc);
  }
}

export async function benchLifecycle(): Promise<Record<string, unknown>> {
  const quick = process.env.LIFECYCLE_QUICK === '1';
  const parts = new Set((process.env.LIFECYCLE_PARTS ?? 'cold,mix').split(','));
  const reps = Number(process.env.LIFECYCLE_REPS ?? (quick ? 2 : 5));
  const pollMs = durationMs(process.env.LIFECYCLE_CAPACITY_POLL ?? '1s');
  const coldLoadMs = Number(process.env.LIFECYCLE_COLD_LOAD_MS ?? 1500);
  const concurrency = Number(process.env.LIFECYCLE_CONCURRENCY ?? 4);
  const warmupS = Number(process.env.LIFECYCLE_WARMUP_S ?? (quick ? 6 : 15));
  const measureS = Number(process.env.LIFECYCLE_MEASURE_S ?? (quick ? 15 : 40));
  const scaleAfter = process.env.LIFECYCLE_SCALE_AFTER ?? '10s';
  const seed = Number(process.env.LIFECYCLE_SEED ?? 1);
  const started = performance.now();
  const machine = machineInfo();
  const dir = scratchDir('viiwork-lifecycle-');
  const names = ['lm-a', 'lm-b', 'lm-c'];
  const layout = staticLayout(MIX, names, 2);
  let cold: Record<string, any> | undefined;
  const mix: Record<string, any>[] = [];
  try {
    if (parts.has('cold')) cold = await benchCold(dir, reps, coldLoadMs, pollMs);
    if (parts.has('mix')) {
      mix.push(await runMixArm('on_demand', dir, { ipBlock: 151, layout, concurrency, warmupS, measureS, seed, scaleAfter }));
      mix.push(await runMixArm('static', dir, { ipBlock: 152, layout, concurrency, warmupS, measureS, seed, scaleAfter }));
    }
  } finally {
    await stopAllProcs();
  }
  if (process.env.LIFECYCLE_KEEP === '1') console.log(`kept ${dir}`);
  else fs.rmSync(dir, { recursive: true, force: true });
  const od = mix.find((a) => a.arm === 'on_demand');
  const st = mix.find((a) => a.arm === 'static');
  const throughputRatio = od && st && st.throughput_req_per_s ? r2(od.throughput_req_per_s / st.throughput_req_per_s) : null;
  const ttftRatio = od?.ttft_mean_ms && st?.ttft_mean_ms ? r2(od.ttft_mean_ms / st.ttft_mean_ms) : null;
  const targets = [
    { target: 'cold start: first token of the first request to an unloaded model vs load time + warm TTFT (Σ cold ÷ Σ reference over the poll phases)', measured: cold ? `${cold.mean_vs_nominal} vs nominal load_ms, ${cold.mean_vs_measured} vs the host's measured load (worst repetition ${Math.max(...cold.repetitions.map((r: any) => r.vs_nominal))})` : null, goal: 'within 10% (0.90-1.10)', met: cold ? Math.abs(cold.mean_vs_nominal - 1) <= 0.1 : null },
    { target: 'mixed five-model trace: on_demand throughput vs the best static layout', measured: throughputRatio, goal: '≥ 0.90', met: throughputRatio === null ? null : throughputRatio >= 0.9 },
    { target: 'mixed five-model trace: nothing lost (every request 200, or 429/503 with Retry-After)', measured: mix.length ? mix.map((a) => `${a.arm} ${a.lost} lost of ${a.requests}`).join('; ') : null, goal: '0 lost', met: mix.length ? mix.every((a) => a.lost === 0) : null },
  ];
  return {
    ...machine,
    settings: { reps, cold_load_ms: coldLoadMs, mix: MIX, sim: SIM, memory_per_model: GIB, memory_budget: 2.5 * GIB, static_layout: layout, concurrency_per_entry: concurrency, warmup_s: warmupS, measure_s: measureS, scale_after: scaleAfter, capacity_poll: process.env.LIFECYCLE_CAPACITY_POLL ?? 'default (1s)', seed },
    cold,
    mix,
    mix_throughput_ratio: throughputRatio,
    mix_ttft_ratio: ttftRatio,
    targets,
    duration_s: r1((performance.now() - started) / 1000),
  };
}

export function printLifecycle(doc: Record<string, any>): void {
  if (doc.cold) console.table(doc.cold.repetitions);
  if (doc.mix?.length)
    console.table(doc.mix.map((a: any) => ({ arm: a.arm, 'req/s': a.throughput_req_per_s, 'mean TTFT ms': a.ttft_mean_ms, 'p95 ms': a.ttft_p95_ms, requests: a.requests, shed: a.shed_with_retry_after, lost: a.lost, 'whole-run req/s': a.whole_run.throughput_req_per_s, loads: JSON.stringify(a.loads_by_reason), unloads: JSON.stringify(a.unloads_by_reason) })));
  for (const t of doc.targets ?? []) console.log(`${t.met === null ? 'n/a ' : t.met ? 'MET ' : 'MISS'}  ${t.target}: ${t.measured} (target ${t.goal})`);
  console.log(`machine: ${doc.cpus} × ${doc.cpu_model}, ${doc.mem_gb} GB, ${doc.node}, commit ${String(doc.git_commit).slice(0, 10)}, load at start ${doc.loadavg_at_start}; took ${doc.duration_s} s`);
}
