/**
 * Routing quality with prompt caches (issue 11; issue 8's first arm set
 * grown): time to first token under open-loop load on a heterogeneous
 * simulated fleet, against an oracle and the usual load balancers, on the
 * same engines and the same request trace.
 *
 * The fleet: three `viiwork serve` nodes (127.0.50.1-3, open mesh, seeds;
 * ROUTING_NET=N moves every address to 127.0.N.x and the prefix-off nodes
 * to 127.0.N+1.x, ports unchanged, so two runs can share one machine),
 * each with one sim engine (engine: sim) of its own speed and slot count,
 * prompt cache on, listening on a fixed loopback address (sim.host/port,
 * 127.0.50.11-13) so the other arms reach the very same engines:
 *
 *   fast  2 slots, first token 40 ms + 100 ms per 1k uncached prompt tokens, 80 tok/s
 *   mid   3 slots, 60 ms + 150 ms per 1k, 60 tok/s
 *   slow  4 slots, 90 ms + 250 ms per 1k, 40 tok/s
 *   (16 tokens per answer)
 *
 * The trace (bench/lib/chat-trace.ts): conversations with 3-12 turns over 6
 * shared system prompts of 1,000-2,500 tokens, half of them sending
 * X-Session-Id; single shots (most with a shared system prompt); long
 * prompts of 4,000-8,000 tokens. Starts are Poisson; a conversation's next
 * turn leaves a think time after the previous one was planned, or 50 ms
 * after its answer ended if that is later. Each request enters a random
 * node. Load is a share of the engines' raw capacity for this mix (Σ slots
 * ÷ mean busy time per request when every request prefills its whole
 * prompt), at 50, 80, 95 and 110%: a router that keeps the caches warm
 * serves the same load at a lower utilisation.
 *
 * Arms (one after the other on every load, caches emptied before each):
 *
 *   viiwork             the three nodes, defaults (prefix affinity on)
 *   viiwork-prefix-off  three more nodes (127.0.51.1-3, their own mesh)
 *                       with routing.prefix_affinity: false, engine: openai
 *                       pointing at the same sim engines
 *   oracle              computed here, a client-side router talking to the
 *                       engines directly: it mirrors every engine's slots,
 *                       queue and prompt cache (bench/lib/oracle.ts) and
 *                       sends each request where 3 × wait + prefill is least
 *   greedy              the same, wait weight 1 (only when named in ROUTING_ARMS)
 *   sticky              the simplest cache rule, client-side: a conversation's
 *                       turns go to the engine that ran its first turn while
 *                       that engine has a free slot (counted by the client's
 *                       own requests in flight); everything else, and a turn
 *                       whose home is full, to the engine with the fewest
 *                       requests in flight (ties: round robin), which then
 *                       becomes the home of a new conversation
 *   round_robin         the client cycles through the engines
 *   least_conn          nginx least_conn in front of the engines
 *   haproxy             haproxy balance leastconn in front of the engines
 *
 * Per arm and load: TTFT (client-side, from the request's send time to the
 * first content chunk) mean/p50/p95/p99, goodput (answers whose TTFT is
 * within ROUTING_SLO_MS), the share of prompt tokens served from cache
 * (usage.prompt_tokens_details.cached_tokens), the 429 rate, lost requests
 * (no complete answer, and no 429/503 with Retry-After), for conversations
 * the share of turns that ran where the previous turn ran, all split by
 * class (conversations with and without session header, single shots, long
 * prompts); and where requests waited: TTFT minus the prefill time the
 * engine reports (timings.prompt_ms) is time spent waiting (in an entry
 * node's queue, which X-Viiwork-Queued-Ms tells, or an engine's).
 *
 * Sessions: for the viiwork arms, how often a later turn with X-Session-Id
 * ran on its previous turn's host when that host had a free slot (the
 * engines' truth, rebuilt from the answers; sessionPlacement).
 *
 * Overload: the viiwork arm alone at 600% of raw capacity (past what even
 * warm caches serve), so entry queues fill and time out: every request must
 * end as a complete answer or a 429/503 with Retry-After.
 *
 * Then the drain experiment of issue 8: 40 one-second requests at once over
 * 8 slots of one node, through a gateway node vs straight to the executor.
 *
 * ROUTING_TRACE=mooncake (issue 42): Mooncake's production chat trace
 * (mooncake-synthetic: its synthetic one) instead of ours, on the agents'
 * fleet with the trace's answer lengths and a 64k context: whole prefix
 * families of the busiest 15 minutes, ten times faster, sampled to each
 * load (bench/lib/mooncake-trace.ts); arms viiwork, oracle, a prefix-sticky
 * arm as `sticky` (bench/lib/prefix-sticky.ts) and least_conn, loads
 * 0.5/0.8/0.95 of 90 s (the whole window), and per load the infinite-cache
 * bound, computed. ROUTING_WINDOW_START_MIN=M replays the 15 minutes from
 * minute M of the trace instead of its busiest. Writes routing-mooncake.json.
 *
 * Writes bench/results/routing.svg (mean TTFT by load, per arm).
 *
 * Env: ROUTING_QUICK=1 (a short run: loads of 6-10 s, 4 s warm-up, no
 * drain), ROUTING_LOADS ("0.5:26,0.8:35,0.95:16,1.1:16": load:seconds of
 * starts), ROUTING_ARMS, ROUTING_SEED (1), ROUTING_WARMUP_S (8),
 * ROUTING_SLO_MS (2000), ROUTING_QUIET_MS (2000), ROUTING_OVERLOAD
 * ("6:14", load:seconds; 0 to skip), ROUTING_CAPACITY_POLL (the viiwork
 * arms' mesh.capacity_poll; default theirs, 1 s), ROUTING_DRAIN (0 to skip),
 * ROUTING_DRAIN_ROUNDS (1), ROUTING_CACHE_RAM (tokens of host-RAM prompt cache per
 * sim engine, today's llama-server's behaviour; default 0, none: the oracle's
 * mirror does not model the pool, so with one it is no longer an upper bound), ROUTING_HEADERS=swapped (agents trace: the
 * sessions with and without a session header trade places, for a paired
 * header-less ratio over two runs), ROUTING_DUMP=DIR (every arm's outcomes as JSON),
 * (and, for the viiwork arms, the entry nodes' decision feeds and each
 * entry's timelines, with the candidates its pricing saw), ROUTING_KEEP=1
 * (keep the scratch dir); BENCH_OUT=DIR writes results there
 * instead of bench/results.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { Agent, request } from 'undici';
import { buildTrace, capacity, MIX, requestsPerStart, systemPrompts, type EngineSpec, type Kind, type TraceRequest, type TraceShape } from './lib/chat-trace.ts';
import { AGENT_MIX, agentSystemPrompts, buildAgentTrace } from './lib/agent-trace.ts';
import { startHaproxy } from './lib/haproxy.ts';
import { startNginx } from './lib/nginx.ts';
import { Oracle } from './lib/oracle.ts';
import { StickyRouter } from './lib/sticky.ts';
import { PrefixStickyRouter } from './lib/prefix-sticky.ts';
import { infiniteCacheBound, MOONCAKE_FILES, MOONCAKE_REPLAY, mooncakeReplay, mooncakeSampleInfo, mooncakeSettings } from './lib/mooncake-trace.ts';
import { groupCpuMs, livePids, machineBusyMs, machineInfo, scratchDir, sleep, startProc, stopAllProcs, stopProc, until, waitQuiet, which, type Proc } from './lib/procs.ts';
import { lineChart } from './lib/svg.ts';
import { weightedRendezvousRank } from '../src/hashing/rendezvous.ts';
import { getJson, startViiwork, VIIWORK_ROOT, waitConverged, waitFleet, type BenchNode } from './lib/viiwork.ts';

const HERE = path.dirname(new URL(import.meta.url).pathname);
const run = promisify(execFile);

/** ROUTING_TRACE: `short` (issue 11's conversations, the default) or `agents` (issue 25's long agent sessions, bench/lib/agent-trace.ts). */
const AGENTS = process.env.ROUTING_TRACE === 'agents';
/** ROUTING_TRACE=mooncake (Kimi's production chat) or mooncake-synthetic: a real trace (issue 42, bench/lib/mooncake-trace.ts), on the agents' fleet. */
const MOONCAKE = process.env.ROUTING_TRACE === 'mooncake' || process.env.ROUTING_TRACE === 'mooncake-synthetic' ? (process.env.ROUTING_TRACE as keyof typeof MOONCAKE_FILES) : undefined;
const MOONCAKE_DIR = process.env.ROUTING_MOONCAKE_DIR ?? path.resolve(HERE, '../../shared/traces/mooncake');
const SHORT_ENGINES: EngineSpec[] = [
  { name: 'fast', slots: 2, ttftMs: 40, prefillPer1k: 100, tokensPerS: 80, outputTokens: 16 },
  { name: 'mid', slots: 3, ttftMs: 60, prefillPer1k: 150, tokensPerS: 60, outputTokens: 16 },
  { name: 'slow', slots: 4, ttftMs: 90, prefillPer1k: 250, tokensPerS: 40, outputTokens: 16 },
];
/** The agents' fleet (issue 25): prompt caches of 4/6/8 slots, prefill 80/150/250 ms per 1k tokens. */
const AGENT_ENGINES: EngineSpec[] = [
  { name: 'fast', slots: 4, ttftMs: 40, prefillPer1k: 80, tokensPerS: 80, outputTokens: 16 },
  { name: 'mid', slots: 6, ttftMs: 60, prefillPer1k: 150, tokensPerS: 60, outputTokens: 16 },
  { name: 'slow', slots: 8, ttftMs: 90, prefillPer1k: 250, tokensPerS: 40, outputTokens: 16 },
];
// Mooncake's answers are the trace's own lengths (max_tokens = output_length, at most 2,000): the sims may run up to that.
export const ENGINES: EngineSpec[] = MOONCAKE ? AGENT_ENGINES.map((e) => ({ ...e, outputTokens: 2048 })) : AGENTS ? AGENT_ENGINES : SHORT_ENGINES;
/** The engines' context: Mooncake's prompts reach 126k tokens (p90 27k); the longer ones keep their first blocks that fit. */
const CONTEXT = MOONCAKE ? 65536 : 32768;
/** ROUTING_HEADERS=swapped (agents trace): the sessions sent with a session header go without, and the others with one. */
const SWAP_HEADERS = process.env.ROUTING_HEADERS === 'swapped';
/** The sim engines' RAM prompt cache in tokens (issue 41, item 5): 0, none (build 4748's behaviour). */
const CACHE_RAM = Number(process.env.ROUTING_CACHE_RAM ?? 0);
const traceOf = (shape: TraceShape, seed: number, systems: string[]) => (AGENTS ? buildAgentTrace(shape, seed, systems, SWAP_HEADERS) : buildTrace(shape, seed, systems));
/** ROUTING_NET (default 50): the third octet of every loopback address, so two runs can share a machine (ports stay). */
const NET = Number(process.env.ROUTING_NET ?? 50);
if (!Number.isInteger(NET) || NET < 1 || NET > 254) throw new Error(`ROUTING_NET must be 1-254, not ${process.env.ROUTING_NET}`);
const ENGINE_ADDR = ENGINES.map((_, k) => `127.0.${NET}.${11 + k}:${18801 + k}`);
const NODE_IP = ENGINES.map((_, k) => `127.0.${NET}.${1 + k}`);
const NOPREFIX_IP = ENGINES.map((_, k) => `127.0.${NET + 1}.${1 + k}`);
const NGINX_LISTEN = `127.0.${NET}.20:18820`;
const HAPROXY_LISTEN = `127.0.${NET}.21:18821`;
const API_PORT = 18810;
const GOSSIP_PORT = 18811;
const REQUEST_DEADLINE_MS = 60_000;
/** A conversation's next turn leaves at least this long after the previous answer ended. */
const TURN_GAP_MS = 50;

const ARMS = ['viiwork', 'viiwork-prefix-off', 'oracle', 'oracle-evict', 'greedy', 'sticky', 'round_robin', 'least_conn', 'haproxy'] as const;
const DEFAULT_ARMS = MOONCAKE ? ['viiwork', 'oracle', 'sticky', 'least_conn'] : AGENTS ? ['viiwork', 'oracle-evict', 'sticky', 'least_conn', 'haproxy'] : ['viiwork', 'viiwork-prefix-off', 'oracle', 'sticky', 'round_robin', 'least_conn', 'haproxy'];
type Arm = (typeof ARMS)[number];
/** The oracle counts a wait for a slot this many times over (issue 8's simulation: a queued request also delays those after it). */
const ORACLE_WAIT_WEIGHT = 3;
const CLASSES = ['conv_header', 'conv_noheader', 'single', 'long'] as const;
type Class = (typeof CLASSES)[number];

export const classOf = (q: TraceRequest): Class => (q.kind === 'conv' ? (q.session ? 'conv_header' : 'conv_noheader') : (q.kind as Exclude<Kind, 'conv'>));

export interface Outcome {
  i: number;
  status: number | null;
  ttft?: number;
  total?: number;
  complete: boolean;
  error?: string;
  retryAfter?: string;
  /** engine name it ran on */
  host?: string;
  node?: string;
  route?: string;
  queuedMs?: number;
  promptTokens?: number;
  cachedTokens?: number;
  /** prefill time the engine reports (timings.prompt_ms) */
  promptMs?: number;
  slot?: number;
  lagMs: number;
  /** ms after the run's start it was sent */
  sentAt: number;
}

const clientAgent = new Agent({ keepAliveTimeout: 30_000, headersTimeout: REQUEST_DEADLINE_MS, bodyTimeout: REQUEST_DEADLINE_MS, connections: 1024 });

/** Which engine a response came from: a node name (either set) or an upstream address or server name. */
function engineOf(h: Record<string, string | string[] | undefined>): string | undefined {
  const node = h['x-viiwork-node'] as string | undefined;
  if (node) {
    const k = Number(node.slice(1)) - 1;
    return ENGINES[k]?.name;
  }
  const up = h['x-upstream'] as string | undefined;
  if (!up) return undefined;
  const byAddr = ENGINE_ADDR.indexOf(up);
  if (byAddr >= 0) return ENGINES[byAddr].name;
  return ENGINES.find((e) => e.name === up)?.name;
}

/** One streamed chat request; times from `sent` (performance.now()). */
async function send(url: string, body: string, headers: Record<string, string>, sent: number, onFirst?: (at: number, slot?: number) => void): Promise<Omit<Outcome, 'i' | 'lagMs' | 'sentAt'>> {
  try {
    const res = await request(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body, dispatcher: clientAgent, signal: AbortSignal.timeout(REQUEST_DEADLINE_MS) });
    const h = res.headers;
    const meta = {
      host: engineOf(h),
      node: h['x-viiwork-node'] as string | undefined,
      route: h['x-viiwork-route'] as string | undefined,
      queuedMs: h['x-viiwork-queued-ms'] !== undefined ? Number(h['x-viiwork-queued-ms']) : undefined,
      slot: h['x-sim-slot'] !== undefined ? Number(h['x-sim-slot']) : undefined,
    };
    if (res.statusCode !== 200) {
      const text = await res.body.text().catch(() => '');
      return { status: res.statusCode, complete: true, error: text.slice(0, 200), retryAfter: h['retry-after'] as string | undefined, ...meta };
    }
    let ttft: number | undefined;
    let buf = '';
    let usage: { prompt_tokens?: number; prompt_tokens_details?: { cached_tokens?: number } } | undefined;
    let timings: { prompt_ms?: number } | undefined;
    let done = false;
    for await (const chunk of res.body) {
      const s = (chunk as Buffer).toString('utf8');
      if (ttft === undefined && s.includes('"content"')) {
        const at = performance.now();
        ttft = at - sent;
        onFirst?.(at, meta.slot);
      }
      buf += s;
      let cut: number;
      while ((cut = buf.indexOf('\n\n')) >= 0) {
        const ev = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        if (ev.startsWith('data: [DONE]')) done = true;
        else if (ev.includes('"usage"')) {
          try {
            const doc = JSON.parse(ev.slice(ev.indexOf('{')));
            if (doc.usage) usage = doc.usage;
            if (doc.timings) timings = doc.timings;
          } catch {
            // not JSON: ignore
          }
        }
      }
    }
    return {
      status: 200,
      ttft,
      total: performance.now() - sent,
      complete: done,
      error: done ? undefined : 'stream ended without [DONE]',
      promptTokens: usage?.prompt_tokens,
      cachedTokens: usage?.prompt_tokens_details?.cached_tokens,
      promptMs: timings?.prompt_ms,
      ...meta,
    };
  } catch (err) {
    const e = err as { code?: string; name?: string; message?: string };
    return { status: null, complete: false, error: `${e.code ?? e.name}: ${e.message ?? ''}`.slice(0, 200) };
  }
}

interface ArmContext {
  viiwork: BenchNode[];
  prefixOff: BenchNode[];
  nginx?: string;
  haproxy?: string;
  engineUrls: string[];
  answer: string;
  /** Mooncake: the sticky arm is prefix-sticky, skipping this many leading blocks every request shares. */
  stickySkip?: number;
}

/** Replay `trace` against one arm; resolves when every request has ended. */
async function runArm(arm: Arm, trace: TraceRequest[], ctx: ArmContext, label: string): Promise<Outcome[]> {
  const oracle =
    arm === 'oracle' || arm === 'greedy' || arm === 'oracle-evict'
      ? // With the sims' RAM pool the oracle mirrors it too (not the eviction-aware one: it names slots, by viiwork's rule).
        new Oracle(ENGINES, ctx.answer, arm === 'greedy' ? 1 : ORACLE_WAIT_WEIGHT, 0.5, arm === 'oracle-evict', arm === 'oracle-evict' ? 0 : CACHE_RAM)
      : undefined;
  let rr = 0;
  // Mooncake has no conversation ids a client could know: its sticky arm follows block-id prefixes (the shared system block skipped).
  const sticky = arm === 'sticky' && !ctx.stickySkip ? new StickyRouter(ENGINES.map((e) => e.slots)) : undefined;
  const prefixSticky = arm === 'sticky' && ctx.stickySkip !== undefined ? new PrefixStickyRouter(ENGINES.map((e) => e.slots), ctx.stickySkip) : undefined;
  const outcomes: Outcome[] = [];
  const ended: { promise: Promise<number>; resolve: (at: number) => void }[] = trace.map(() => {
    let resolve!: (at: number) => void;
    const promise = new Promise<number>((r) => (resolve = r));
    return { promise, resolve };
  });
  const t0 = performance.now() + 50;

  const fire = async (q: TraceRequest, due: number) => {
    const now = performance.now();
    const lagMs = now - due;
    let url: string;
    let engine: number | undefined;
    let idSlot: number | undefined;
    if (arm === 'viiwork') url = `${ctx.viiwork[q.entry].url}/v1/chat/completions`;
    else if (arm === 'viiwork-prefix-off') url = `${ctx.prefixOff[q.entry].url}/v1/chat/completions`;
    else if (arm === 'least_conn') url = `http://${ctx.nginx}/v1/chat/completions`;
    else if (arm === 'haproxy') url = `http://${ctx.haproxy}/v1/chat/completions`;
    else {
      if (oracle) ({ engine, slot: idSlot } = oracle.pick(q.i, q.prompt, q.promptTokens, now, q.outputTokens));
      else engine = prefixSticky ? prefixSticky.pick(q.blocks ?? []) : sticky ? sticky.pick(q.conv) : rr++ % ENGINES.length;
      url = `${ctx.engineUrls[engine]}/v1/chat/completions`;
    }
    // The eviction-aware oracle chooses the slot too, and names it to the engine as viiwork does (id_slot).
    const body = JSON.stringify({ model: 'm', stream: true, stream_options: { include_usage: true }, max_tokens: q.outputTokens ?? ENGINES[0].outputTokens, messages: q.messages, ...(idSlot !== undefined ? { id_slot: idSlot } : {}) });
    const headers: Record<string, string> = q.session ? { 'x-session-id': q.session } : {};
    const o = await send(url, body, headers, now, oracle && engine !== undefined ? (at, slot) => oracle.mirrors[engine!].first(q.i, at, slot) : undefined);
    const end = performance.now();
    if (oracle && engine !== undefined) oracle.mirrors[engine].finish(q.i, end);
    if (engine !== undefined) (sticky ?? prefixSticky)?.done(engine);
    outcomes.push({ i: q.i, lagMs, sentAt: now - t0, ...o, host: o.host ?? (engine !== undefined ? ENGINES[engine].name : undefined) });
    ended[q.i].resolve(end);
  };

  const pending: Promise<void>[] = [];
  for (const q of trace) {
    const due = t0 + q.at;
    if (q.after !== undefined) {
      // A next turn: at its planned time, or once the previous answer has ended.
      pending.push(
        ended[q.after].promise.then(async (prevEnd) => {
          const at = Math.max(due, prevEnd + (q.gapMs ?? TURN_GAP_MS));
          const wait = at - performance.now();
          if (wait > 1) await sleep(wait - 0.5);
          await fire(q, at);
        }),
      );
      continue;
    }
    const wait = due - performance.now();
    if (wait > 1) await sleep(wait - 0.5);
    while (performance.now() < due) {
      // busy-wait the last half millisecond
    }
    pending.push(fire(q, due));
  }
  await Promise.all(pending);
  outcomes.sort((a, b) => a.i - b.i);
  const ok = outcomes.filter((o) => o.status === 200 && o.complete).length;
  console.log(`${label} ${arm}: ${trace.length} sent, ${ok} complete 200s, ${Math.round((performance.now() - t0) / 100) / 10} s`);
  return outcomes;
}

/** Σ |predicted − engine| cached tokens and the requests counted, over the entry nodes' /metrics (viiwork_cache_prediction_error_tokens). */
async function predictionTotals(nodes: BenchNode[]): Promise<{ sum: number; count: number }> {
  let sum = 0;
  let count = 0;
  for (const n of nodes) {
    const text = await (await request(`${n.url}/metrics`)).body.text();
    for (const m of text.matchAll(/^viiwork_cache_prediction_error_tokens_(sum|count)(?:\{[^}]*\})? (\S+)$/gm)) {
      if (m[1] === 'sum') sum += Number(m[2]);
      else count += Number(m[2]);
    }
  }
  return { sum, count };
}

/**
 * How well the entry nodes knew the caches over one arm's run: the mean
 * absolute error of their predicted cached tokens against the engines'
 * counts, as a share of the prompt tokens answered (issue 17's target: ≤ 0.10).
 */
function predictionOf(before: { sum: number; count: number }, after: { sum: number; count: number }, outs: Outcome[]) {
  const requests = after.count - before.count;
  const prompt = outs.filter((o) => good(o)).reduce((a, o) => a + (o.promptTokens ?? 0), 0);
  const error = after.sum - before.sum;
  return { requests, abs_error_tokens: Math.round(error), prompt_tokens: prompt, mae_share: prompt && requests ? r3(error / prompt) : null };
}

function pct(sorted: number[], p: number): number | null {
  if (!sorted.length) return null;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}
const r1 = (x: number | null | undefined) => (x === null || x === undefined || !Number.isFinite(x) ? null : Math.round(x * 10) / 10);
const r3 = (x: number | null | undefined) => (x === null || x === undefined || !Number.isFinite(x) ? null : Math.round(x * 1000) / 1000);
const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : NaN);

/** Answered 200 with a complete stream. */
const good = (o: Outcome) => o.status === 200 && o.complete;
/** Refused the way a client can act on: 429 or 503 with Retry-After. */
const shed = (o: Outcome) => (o.status === 429 || o.status === 503) && o.retryAfter !== undefined;

function classStats(outs: Outcome[], trace: TraceRequest[], sloMs: number) {
  const ok = outs.filter((o) => good(o) && o.ttft !== undefined);
  const ttfts = ok.map((o) => o.ttft!).sort((a, b) => a - b);
  const prompt = ok.reduce((a, o) => a + (o.promptTokens ?? 0), 0);
  const cached = ok.reduce((a, o) => a + (o.cachedTokens ?? 0), 0);
  const withPrefill = ok.filter((o) => o.promptMs !== undefined);
  const waits = withPrefill.map((o) => Math.max(0, o.ttft! - o.promptMs!));
  const queued = ok.filter((o) => o.queuedMs !== undefined).map((o) => o.queuedMs!);
  // Conversations: did each later turn run where the previous one ran?
  const byI = new Map(outs.map((o) => [o.i, o]));
  let turns = 0;
  let stayed = 0;
  // Issue 25: a later turn found its cache when the engine served at least half its prompt from it.
  let warm = 0;
  let stayedWarm = 0;
  for (const o of ok) {
    const q = trace[o.i];
    if (q.kind !== 'conv' || q.after === undefined) continue;
    const prev = byI.get(q.after);
    if (!prev || !good(prev) || !prev.host || !o.host) continue;
    turns++;
    const found = (o.cachedTokens ?? 0) >= (q.warmTokens ?? 0.5 * (o.promptTokens ?? Infinity));
    if (found) warm++;
    if (prev.host === o.host) {
      stayed++;
      if (found) stayedWarm++;
    }
  }
  return {
    requests: outs.length,
    ok: ok.length,
    ttft_mean_ms: r1(mean(ttfts)),
    ttft_p50_ms: r1(pct(ttfts, 50)),
    ttft_p95_ms: r1(pct(ttfts, 95)),
    ttft_p99_ms: r1(pct(ttfts, 99)),
    within_slo: ok.filter((o) => o.ttft! <= sloMs).length,
    cached_share: prompt ? r3(cached / prompt) : null,
    prompt_tokens_mean: r1(prompt / (ok.length || NaN)),
    /** engine-reported prefill (timings.prompt_ms) and the rest of TTFT: waiting for a slot, in a queue or on the way */
    prefill_mean_ms: r1(mean(withPrefill.map((o) => o.promptMs!))),
    wait_mean_ms: r1(mean(waits)),
    waited_over_50ms: waits.filter((w) => w > 50).length,
    entry_queue_mean_ms: queued.length ? r1(mean(queued)) : undefined,
    entry_queued: queued.length ? queued.filter((x) => x > 0).length : undefined,
    ...(turns
      ? { later_turns: turns, stayed_on_host_share: r3(stayed / turns), later_turns_warm_share: r3(warm / turns), stayed_found_cache_share: stayed ? r3(stayedWarm / stayed) : null, stayed_and_found_share: r3(stayedWarm / turns) }
      : {}),
  };
}

/**
 * Sessions (issue 17): for every later turn of a conversation that sent
 * X-Session-Id, did it run on the host its previous turn ran on, when that
 * host had a free slot at the time it was sent? Free slots are the engines'
 * own, rebuilt from the answers (a request holds a slot from its first token
 * minus its reported prefill to its end). Also, how often the first turn ran
 * on the session's home (SPEC 9.6: the first host of its rendezvous ranking
 * weighted by slots; a home outside the band of the best free host is left).
 */
export function sessionPlacement(outs: Outcome[], trace: TraceRequest[], nodes: string[]): Record<string, unknown> | undefined {
  const held = outs
    .filter((o) => good(o) && o.host && o.ttft !== undefined && o.total !== undefined)
    .map((o) => ({ i: o.i, host: o.host!, from: o.sentAt + o.ttft! - (o.promptMs ?? 0), to: o.sentAt + o.total! }));
  const nodeOf = (engine: string) => nodes[ENGINES.findIndex((e) => e.name === engine)];
  const freeAt = (node: string, at: number, self: number) => {
    const k = nodes.indexOf(node);
    const busy = held.filter((h) => h.i !== self && nodeOf(h.host) === node && h.from <= at && at < h.to).length;
    return ENGINES[k].slots - busy;
  };
  // SPEC 9.6's home: the key's rendezvous ranking weighted by each host's slots.
  const homeOf = (key: string) => weightedRendezvousRank(key, nodes.map((name, k) => ({ name, weight: ENGINES[k].slots })))[0];
  const byI = new Map(outs.map((o) => [o.i, o]));
  let turns = 0;
  let homeFree = 0;
  let stayed = 0;
  let firsts = 0;
  let firstOnRanked = 0;
  for (const o of outs) {
    const q = trace[o.i];
    if (!q.session || !good(o) || !o.host) continue;
    turns++;
    if (q.after === undefined) {
      firsts++;
      if (nodeOf(o.host) === homeOf(q.session)) firstOnRanked++;
      continue;
    }
    const prev = byI.get(q.after);
    if (!prev || !good(prev) || !prev.host) continue;
    const home = nodeOf(prev.host);
    if (freeAt(home, o.sentAt, o.i) <= 0) continue;
    homeFree++;
    if (nodeOf(o.host) === home) stayed++;
  }
  if (!turns) return undefined;
  return {
    turns,
    later_turns_home_free: homeFree,
    stayed_home_then: stayed,
    stayed_home_share: homeFree ? r3(stayed / homeFree) : null,
    first_turns: firsts,
    first_turn_on_ranked_host_share: firsts ? r3(firstOnRanked / firsts) : null,
  };
}

function summarise(outcomes: Outcome[], trace: TraceRequest[], seconds: number, sloMs: number) {
  const statuses: Record<string, number> = {};
  for (const o of outcomes) if (o.status !== 200) statuses[String(o.status)] = (statuses[String(o.status)] ?? 0) + 1;
  const lostList = outcomes.filter((o) => !good(o) && !shed(o));
  const where: Record<string, number> = {};
  for (const o of outcomes) if (good(o) && o.host) where[o.host] = (where[o.host] ?? 0) + 1;
  const routes: Record<string, number> = {};
  for (const o of outcomes) if (o.route) routes[o.route] = (routes[o.route] ?? 0) + 1;
  const perHost: Record<string, { requests: number; prefill_mean_ms: number | null; cached_share: number | null; wait_mean_ms: number | null }> = {};
  for (const e of ENGINES) {
    const os = outcomes.filter((o) => good(o) && o.host === e.name && o.promptMs !== undefined && o.ttft !== undefined);
    const pt = os.reduce((a, o) => a + (o.promptTokens ?? 0), 0);
    perHost[e.name] = {
      requests: os.length,
      prefill_mean_ms: r1(mean(os.map((o) => o.promptMs!))),
      cached_share: pt ? r3(os.reduce((a, o) => a + (o.cachedTokens ?? 0), 0) / pt) : null,
      wait_mean_ms: r1(mean(os.map((o) => Math.max(0, o.ttft! - o.promptMs!)))),
    };
  }
  // Where each conversation's turns ran, one letter per turn (f, m, s; - when not answered), with its class: which turns moved.
  const paths: Record<string, string> = {};
  for (const o of [...outcomes].sort((a, b) => a.i - b.i)) {
    const q = trace[o.i];
    if (q.kind !== 'conv') continue;
    const k = `${q.conv}${q.session ? 'h' : ''}`;
    paths[k] = (paths[k] ?? '') + (good(o) && o.host ? o.host[0] : '-');
  }
  const all = classStats(outcomes, trace, sloMs);
  const classes = Object.fromEntries(CLASSES.map((c) => [c, classStats(outcomes.filter((o) => classOf(trace[o.i]) === c), trace, sloMs)]));
  const lags = outcomes.map((o) => o.lagMs).sort((a, b) => a - b);
  const last = Math.max(...outcomes.map((o) => o.sentAt));
  return {
    ...all,
    non_200: outcomes.filter((o) => o.status !== 200).length,
    statuses,
    rate_429: r3((statuses['429'] ?? 0) / outcomes.length),
    shed_with_retry_after: outcomes.filter(shed).length,
    lost: lostList.length,
    lost_examples: [...new Set(lostList.map((o) => `${o.status ?? 'no answer'}${o.retryAfter === undefined && o.status ? ' without Retry-After' : ''}: ${o.error ?? ''}`))].slice(0, 5),
    goodput_req_per_s: r1(all.within_slo / seconds),
    throughput_req_per_s: r1(all.ok / seconds),
    offered_req_per_s: r1(outcomes.length / seconds),
    last_send_s: r1(last / 1000),
    ran_on: where,
    per_host: perHost,
    ...(Object.keys(routes).length ? { viiwork_routes: routes } : {}),
    classes,
    conversation_paths: paths,
    send_lag_ms: { p99: r1(pct(lags, 99)), max: r1(lags[lags.length - 1]) },
  };
}



/** Wait until every engine's slots are idle, then empty their caches (llama-server's slot erase). */
async function resetEngines(urls: string[]): Promise<void> {
  await until(
    async () => {
      const all = await Promise.all(urls.map((u) => getJson<{ id: number; is_processing: boolean }[]>(`${u}/slots`)));
      return all.every((slots) => slots.every((s) => !s.is_processing));
    },
    'engines idle',
    90_000,
    100,
  );
  for (const u of urls) {
    // The sim's RAM pool survives a slot erase (as llama-server's does): empty it too, or every arm after the first
    // would find the previous arm's prompts restored from RAM (session 21's pool runs did, and least_conn looked warm).
    const cleared = await request(`${u}/cache/clear`, { method: 'POST' });
    await cleared.body.text();
    if (cleared.statusCode === 200) continue;
    const slots = await getJson<{ id: number }[]>(`${u}/slots`);
    for (const s of slots) {
      const r = await request(`${u}/slots/${s.id}?action=erase`, { method: 'POST' });
      await r.body.text();
      if (r.statusCode !== 200) throw new Error(`${u}/slots/${s.id}?action=erase: HTTP ${r.statusCode}`);
    }
  }
}

/** `viiwork check` on a config the benchmark wrote: the CLI accepts it, or the arm is skipped with its findings. */
async function viiworkCheck(file: string): Promise<void> {
  try {
    await run(process.execPath, [path.join(VIIWORK_ROOT, 'bin/viiwork.js'), 'check', '--config', file, '--no-ports'], { timeout: 60_000 });
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string; message: string };
    throw new Error(`viiwork check refused ${file}: ${(e.stdout ?? '') + (e.stderr ?? '') || e.message}`.slice(0, 1500));
  }
}

function simModel(k: number) {
  const e = ENGINES[k];
  const [host, port] = ENGINE_ADDR[k].split(':');
  return {
    name: 'm',
    engine: 'sim',
    parallel: e.slots,
    context: CONTEXT,
    workloads: ['chat', 'completion'],
    // ROUTING_CACHE_RAM (tokens): today's llama-server, its host-RAM prompt cache and its own slot rule (similarity 0.1);
    // left out, build 4748's (no pool, similarity 0.5), as every earlier run.
    sim: { ttft_ms: e.ttftMs, prefill_ms_per_1k: e.prefillPer1k, tokens_per_s: e.tokensPerS, output_tokens: e.outputTokens, cache: true, ...(CACHE_RAM > 0 ? { cache_ram: CACHE_RAM } : { slot_prompt_similarity: 0.5 }), host, port: Number(port) },
  };
}

export async function benchRouting(): Promise<Record<string, unknown>> {
  const quick = process.env.ROUTING_QUICK === '1';
  const defaultLoads = MOONCAKE ? (quick ? '0.5:30,0.8:30,0.95:30' : '0.5:90,0.8:90,0.95:90') : AGENTS ? (quick ? '0.5:20,0.8:25,0.95:20' : '0.5:40,0.8:50,0.95:40') : quick ? '0.5:6,0.8:10,0.95:6,1.1:6' : '0.5:26,0.8:35,0.95:16,1.1:16';
  const loads = (process.env.ROUTING_LOADS ?? defaultLoads).split(',').map((s) => {
    const [l, secs] = s.split(':').map(Number);
    return { load: l, seconds: secs };
  });
  const wanted = new Set((process.env.ROUTING_ARMS ?? DEFAULT_ARMS.join(',')).split(','));
  const seed = Number(process.env.ROUTING_SEED ?? 1);
  const warmupS = Number(process.env.ROUTING_WARMUP_S ?? (quick ? 4 : 8));
  const sloMs = Number(process.env.ROUTING_SLO_MS ?? 2000);
  const drainOn = process.env.ROUTING_DRAIN !== undefined ? process.env.ROUTING_DRAIN !== '0' : !quick && !AGENTS && !MOONCAKE;
  const drainRounds = Number(process.env.ROUTING_DRAIN_ROUNDS ?? 1);
  const [overloadLoad, overloadS] = (process.env.ROUTING_OVERLOAD ?? '6:14').split(':').map(Number);
  // The overload run replays the synthetic short trace: not part of a Mooncake run.
  const overloadOn = !MOONCAKE && (process.env.ROUTING_OVERLOAD !== undefined ? process.env.ROUTING_OVERLOAD !== '0' : !AGENTS);
  const overload = { load: overloadLoad, seconds: overloadS };
  let overloadResult: Record<string, any> | undefined;
  const quietBudget = Number(process.env.ROUTING_QUIET_MS ?? 2000);
  // Agent sessions run long (20 turns of 1 s think + the answer): their turns may be planned well past the starts.
  const tailS = AGENTS ? 20 : 3;
  // ROUTING_CAPACITY_POLL (say 250ms): both viiwork arms poll capacity at this pace instead of the default 1 s, to see what fresher reports would buy.
  const meshExtra: Record<string, unknown> = process.env.ROUTING_CAPACITY_POLL ? { capacity_poll: process.env.ROUTING_CAPACITY_POLL } : {};
  const started = performance.now();
  const machine = machineInfo();
  const skipped: { arm: string; reason: string }[] = [];

  const systems = AGENTS ? agentSystemPrompts(seed) : systemPrompts(seed);
  const dir = scratchDir('viiwork-routing-');
  const results: Record<string, any>[] = [];
  let drain: Record<string, unknown> | undefined;
  let settings: Record<string, unknown> = {};
  try {
    const engineUrls = ENGINE_ADDR.map((a) => `http://${a}`);
    const ctx: ArmContext = { viiwork: [], prefixOff: [], engineUrls, answer: '' };
    const windowStart = process.env.ROUTING_WINDOW_START_MIN !== undefined ? Number(process.env.ROUTING_WINDOW_START_MIN) * 60_000 : undefined;
    if (windowStart !== undefined && !(windowStart >= 0)) throw new Error(`ROUTING_WINDOW_START_MIN must be minutes from the trace's start (0 or more), not ${process.env.ROUTING_WINDOW_START_MIN}`);
    const moon = MOONCAKE ? mooncakeReplay(path.join(MOONCAKE_DIR, MOONCAKE_FILES[MOONCAKE]), ENGINES, CONTEXT, 3, windowStart) : undefined;
    if (moon) ctx.stickySkip = moon(0.5, 1, seed, seed).commonBlocks;

    // The three nodes that own the sim engines (the viiwork arm), checked by `viiwork check` first.
    const specs = ENGINES.map((_, k) => ({
      name: `n${k + 1}`,
      ip: NODE_IP[k],
      apiPort: API_PORT,
      gossipPort: GOSSIP_PORT,
      seeds: k === 0 ? [] : [`${NODE_IP[0]}:${GOSSIP_PORT}`],
      mesh: meshExtra,
      models: [simModel(k)],
    }));
    const procs: Proc[] = [];
    try {
      for (const s of specs) {
        const n = await startViiwork(s, dir, { check: viiworkCheck });
        ctx.viiwork.push(n);
        procs.push(n.proc);
      }
      await waitConverged(ctx.viiwork);
      for (const n of ctx.viiwork) await waitFleet(n, 'm', ['n1', 'n2', 'n3']);
    } catch (err) {
      // Without these nodes there are no engines: nothing can run.
      throw new Error(`the viiwork nodes that hold the sim engines did not start: ${(err as Error).message}`);
    }
    // The sim's answer (deterministic): what conversations send back as the assistant's turn.
    {
      const r = await request(`${engineUrls[0]}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'm', max_tokens: Math.min(64, ENGINES[0].outputTokens), messages: [{ role: 'user', content: 'probe' }] }) });
      const doc = (await r.body.json()) as { choices: { message: { content: string } }[] };
      ctx.answer = doc.choices[0].message.content;
    }

    if (wanted.has('viiwork-prefix-off')) {
      try {
        for (let k = 0; k < ENGINES.length; k++) {
          const n = await startViiwork(
            {
              name: `p${k + 1}`,
              ip: NOPREFIX_IP[k],
              apiPort: API_PORT,
              gossipPort: GOSSIP_PORT,
              seeds: k === 0 ? [] : [`${NOPREFIX_IP[0]}:${GOSSIP_PORT}`],
              mesh: meshExtra,
              routing: { prefix_affinity: false },
              models: [{ name: 'm', engine: 'openai', url: engineUrls[k], parallel: ENGINES[k].slots, context: CONTEXT, workloads: ['chat', 'completion'] }],
            },
            dir,
            { check: viiworkCheck },
          );
          ctx.prefixOff.push(n);
          procs.push(n.proc);
        }
        await waitConverged(ctx.prefixOff);
        for (const n of ctx.prefixOff) await waitFleet(n, 'm', ['p1', 'p2', 'p3']);
      } catch (err) {
        skipped.push({ arm: 'viiwork-prefix-off', reason: String((err as Error).message).slice(0, 1500) });
        wanted.delete('viiwork-prefix-off');
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
          procs.push(await startNginx('nginx', { dir: ndir, listen: NGINX_LISTEN, upstreams: ENGINE_ADDR, balance: 'least_conn;', upstreamHeader: true }));
          ctx.nginx = NGINX_LISTEN;
        } catch (err) {
          skipped.push({ arm: 'least_conn', reason: String((err as Error).message).slice(0, 800) });
          wanted.delete('least_conn');
        }
      }
    }
    if (wanted.has('haproxy')) {
      if (!which('haproxy')) {
        skipped.push({ arm: 'haproxy', reason: 'haproxy is not installed (apt-get install haproxy)' });
        wanted.delete('haproxy');
      } else {
        try {
          const hdir = path.join(dir, 'haproxy');
          fs.mkdirSync(hdir);
          procs.push(await startHaproxy('haproxy', { dir: hdir, listen: HAPROXY_LISTEN, upstreams: ENGINES.map((e, k) => ({ name: e.name, addr: ENGINE_ADDR[k] })), balance: 'leastconn', upstreamHeader: true }));
          ctx.haproxy = HAPROXY_LISTEN;
        } catch (err) {
          skipped.push({ arm: 'haproxy', reason: String((err as Error).message).slice(0, 800) });
          wanted.delete('haproxy');
        }
      }
    }

    // Capacity of this mix with ideal caching, from a long sample of the same mix.
    // Agents' prompts are long (a 27k-token session renders 100 kB per turn): a shorter sample of the same mix.
    // Mooncake: its 80% sample of the whole window stands for the mix (each load's sample is sized on its own capacity).
    const moonSample = moon?.(0.8, MOONCAKE_REPLAY.windowMs / MOONCAKE_REPLAY.timeScale / 1000, seed, seed + 999);
    const sample = moonSample?.trace ?? traceOf({ startsPerS: 1, seconds: AGENTS ? 200 : 3000, tailS: 1e6, entries: 3, answer: ctx.answer }, seed + 999, systems);
    const cap = capacity(ENGINES, sample, 'none');
    const capIdeal = capacity(ENGINES, sample, 'ideal');
    const perStart = requestsPerStart(sample);
    const kinds = Object.fromEntries(CLASSES.map((c) => [c, Math.round((sample.filter((q) => classOf(q) === c).length / sample.length) * 1000) / 1000]));
    settings = {
      engines: ENGINES.map((e, k) => ({ ...e, address: ENGINE_ADDR[k], speed_class_ms: e.ttftMs + e.prefillPer1k })),
      capacity_req_per_s: Math.round(cap.reqPerS * 100) / 100,
      capacity_definition: 'Σ slots ÷ mean slot-busy time per request of this mix when every request prefills its whole prompt (no cache): the engines\' raw capacity; loads are shares of it',
      mean_busy_ms_no_cache: cap.meanBusyMs,
      capacity_ideal_cache_req_per_s: Math.round(capIdeal.reqPerS * 100) / 100,
      mean_busy_ms_ideal_cache: capIdeal.meanBusyMs,
      requests_per_start: Math.round(perStart * 100) / 100,
      request_mix: kinds,
      mix: MIX,
      answer_tokens: ENGINES[0].outputTokens,
      loads: loads.map((l) => ({ ...l, rate_req_per_s: Math.round(l.load * cap.reqPerS * 100) / 100 })),
      seed,
      ...(AGENTS ? { session_headers: SWAP_HEADERS ? 'swapped' : 'as drawn' } : {}),
      ...(moonSample ? { trace: mooncakeSettings(moonSample) } : {}),
      tail_s: tailS,
      oracle_wait_weight: ORACLE_WAIT_WEIGHT,
      viiwork_warmup_s: warmupS,
      slo_ms: sloMs,
      viiwork_mesh_extra: meshExtra,
      viiwork_config: 'defaults (capacity_poll 1s, stale_after 3s, queue_max 64, queue_timeout 20s); parallel = the engine\'s slots; viiwork-prefix-off: routing.prefix_affinity false, engine openai at the same sims',
      ttft: 'client-side, from the send time to the first content chunk',
      quick,
    };
    console.log(`capacity ${settings.capacity_req_per_s} req/s (${perStart.toFixed(2)} requests per start); mix ${JSON.stringify(kinds)}`);

    if (warmupS > 0) {
      // Lets every node measure its engine and publish a score; not measured.
      const warm = moon?.(0.5, warmupS, seed + 1000, seed + 1001).trace ?? traceOf({ startsPerS: (0.5 * cap.reqPerS) / perStart, seconds: warmupS, tailS: 1, entries: 3, answer: ctx.answer }, seed + 1000, systems);
      for (const arm of ['viiwork', 'viiwork-prefix-off'] as Arm[]) {
        if (!wanted.has(arm)) continue;
        await resetEngines(engineUrls);
        await runArm(arm, warm, ctx, 'warm-up');
      }
    }

    for (const [li, { load, seconds }] of loads.entries()) {
      // Mooncake: the same family order at every load (seed), so a higher load's sample holds a lower one's.
      const ms = moon?.(load, seconds, seed, seed * 100 + li);
      const trace = ms?.trace ?? traceOf({ startsPerS: (load * cap.reqPerS) / perStart, seconds, tailS, entries: 3, answer: ctx.answer }, seed * 100 + li, systems);
      const byArm: Record<string, Record<string, any>> = {};
      for (const arm of ARMS) {
        if (!wanted.has(arm)) continue;
        await resetEngines(engineUrls);
        await waitQuiet(livePids().map((p) => p.pid), 0.3, quietBudget);
        const ours = livePids();
        const meshArm = arm === 'viiwork' ? ctx.viiwork : arm === 'viiwork-prefix-off' ? ctx.prefixOff : undefined;
        const predicted0 = meshArm ? await predictionTotals(meshArm) : undefined;
        const cpu0 = { busy: machineBusyMs(), groups: groupCpuMs(ours.map((p) => p.pid)), self: process.cpuUsage(), at: performance.now() };
        const outcomes = await runArm(arm, trace, ctx, `load ${Math.round(load * 100)}%`);
        const groups1 = groupCpuMs(ours.map((p) => p.pid));
        if (process.env.ROUTING_DUMP) {
          fs.mkdirSync(process.env.ROUTING_DUMP, { recursive: true });
          const rows = outcomes.map((o) => ({ ...o, entry: trace[o.i].entry, session: trace[o.i].session, kind: classOf(trace[o.i]), after: trace[o.i].after }));
          fs.writeFileSync(path.join(process.env.ROUTING_DUMP, `${arm}-${load}.json`), JSON.stringify(rows));
          // The entry nodes' decision feeds (the last 200 each): predicted and engine cached tokens per request.
          if (meshArm) {
            const feeds = await Promise.all(meshArm.map((n) => getJson(`${n.url}/v1/decisions`)));
            fs.writeFileSync(path.join(process.env.ROUTING_DUMP, `${arm}-${load}-decisions.json`), JSON.stringify(feeds));
            // Each entry's own requests with the candidates its pricing saw (the last 200 timelines each node keeps).
            const timelines: unknown[] = [];
            for (const [k, n] of meshArm.entries()) {
              for (const rec of ((feeds[k] as { data?: { entry?: string; timeline?: string }[] }).data ?? []).filter((d) => d.entry === n.name && d.timeline)) {
                try {
                  timelines.push(await getJson(`${n.url}/v1/timeline/${encodeURIComponent(rec.timeline!)}`));
                } catch {
                  // no longer kept
                }
              }
            }
            fs.writeFileSync(path.join(process.env.ROUTING_DUMP, `${arm}-${load}-timelines.json`), JSON.stringify(timelines));
          }
        }
        const sessions = meshArm ? sessionPlacement(outcomes, trace, meshArm.map((n) => n.name)) : undefined;
        const selfUs = process.cpuUsage(cpu0.self);
        let oursMs = (selfUs.user + selfUs.system) / 1000;
        const cpu: Record<string, number> = { load_generator: oursMs };
        for (const p of ours) {
          const d = groups1.get(p.pid)! - cpu0.groups.get(p.pid)!;
          oursMs += d;
          cpu[p.name] = d;
        }
        const wallMs = performance.now() - cpu0.at;
        const foreignMs = Math.max(0, machineBusyMs() - cpu0.busy - oursMs);
        byArm[arm] = {
          ...summarise(outcomes, trace, seconds, sloMs),
          cpu_ms_per_req: Object.fromEntries(Object.entries(cpu).filter(([, v]) => v > 0).map(([k, v]) => [k, Math.round((v / outcomes.length) * 100) / 100])),
          foreign_cpu_share: Math.round((foreignMs / wallMs) * 100) / 100,
          wall_s: r1(wallMs / 1000),
          ...(sessions ? { sessions } : {}),
          ...(meshArm && predicted0 ? { prediction: predictionOf(predicted0, await predictionTotals(meshArm), outcomes) } : {}),
        };
      }
      const ratio = (arm: string, base: string, pick: (a: Record<string, any>) => number | null | undefined = (a) => a.ttft_mean_ms) => {
        const x = byArm[arm] && pick(byArm[arm]);
        const y = byArm[base] && pick(byArm[base]);
        return x && y ? Math.round((x / y) * 100) / 100 : null;
      };
      const arms: Record<string, any>[] = Object.entries(byArm).map(([arm, st]) => ({ arm, ...st, mean_vs_oracle: ratio(arm, AGENTS ? 'oracle-evict' : 'oracle'), mean_vs_least_conn: ratio(arm, 'least_conn'), mean_vs_sticky: ratio(arm, 'sticky') }));
      results.push({
        load,
        seconds,
        rate_req_per_s: Math.round(((ms ? ms.offeredLoad * ms.capacityReqPerS : load * cap.reqPerS) * 100)) / 100,
        requests: trace.length,
        conversations: new Set(trace.filter((q) => q.conv !== undefined).map((q) => q.conv)).size,
        ...(ms ? { sample: mooncakeSampleInfo(ms), bound: infiniteCacheBound(trace, ENGINES) } : {}),
        arms,
      });
      console.table(arms.map((a) => ({ arm: a.arm, ok: a.ok, shed: a.shed_with_retry_after, lost: a.lost, 'mean ms': a.ttft_mean_ms, 'p95 ms': a.ttft_p95_ms, cached: a.cached_share, '÷oracle': a.mean_vs_oracle, '÷least_conn': a.mean_vs_least_conn, '÷sticky': a.mean_vs_sticky })));
    }

    if (overloadOn && wanted.has('viiwork')) {
      // Past what the engines can serve even with every cache warm: the entry nodes' queues fill and time out, so
      // requests must come back 429 (or 503) with Retry-After, and none may be lost.
      const trace = traceOf({ startsPerS: (overload.load * cap.reqPerS) / perStart, seconds: overload.seconds, tailS, entries: 3, answer: ctx.answer }, seed * 100 + 99, systems);
      await resetEngines(engineUrls);
      await waitQuiet(livePids().map((p) => p.pid), 0.3, quietBudget);
      const outcomes = await runArm('viiwork', trace, ctx, `overload ${Math.round(overload.load * 100)}%`);
      const st = summarise(outcomes, trace, overload.seconds, sloMs);
      overloadResult = { load: overload.load, seconds: overload.seconds, rate_req_per_s: Math.round(overload.load * cap.reqPerS * 100) / 100, arm: 'viiwork', ...st };
      console.log(`overload ${Math.round(overload.load * 100)}%: ${st.ok} answered, ${st.shed_with_retry_after} refused with Retry-After ${JSON.stringify(st.statuses)}, ${st.lost} lost`);
    }

    if (drainOn) {
      for (const p of procs) await stopProc(p);
      drain = await drainExperiment(dir, drainRounds).catch((err) => ({ skipped: String((err as Error).message).slice(0, 1500) }));
    }
  } finally {
    await stopAllProcs();
  }
  const targets = checkTargets(results, drain, overloadResult);
  if (process.env.ROUTING_KEEP === '1') console.log(`kept ${dir}`);
  else fs.rmSync(dir, { recursive: true, force: true });
  const doc = { ...machine, settings, skipped, results, overload: overloadResult, drain, targets, duration_s: r1((performance.now() - started) / 1000) };
  return doc;
}

/** The chart of the routing results: mean TTFT by load, one line per arm. */
export function routingChart(doc: Record<string, any>): string {
  const loads: number[] = (doc.results ?? []).map((r: any) => r.load);
  const arms = [...new Set((doc.results ?? []).flatMap((r: any) => r.arms.map((a: any) => a.arm as string)))] as string[];
  return lineChart({
    title: 'Mean time to first token by load',
    subtitle: `3 sim engines (2/3/4 slots, three speeds, prompt cache on); ${doc.settings?.capacity_req_per_s} req/s = 100%; ${String(doc.git_commit ?? '').slice(0, 10)} ${String(doc.at ?? '').slice(0, 10)}`,
    xLabel: 'offered load (share of the engines\' capacity without cache)',
    yLabel: 'mean TTFT, ms',
    logY: true,
    xTicks: loads.map((l) => ({ value: l * 100, label: `${Math.round(l * 100)}%` })),
    series: arms.map((arm) => ({
      name: arm,
      dashed: arm === 'oracle' || arm === 'oracle-evict' || arm === 'greedy',
      points: (doc.results ?? []).map((r: any) => ({ x: r.load * 100, y: r.arms.find((a: any) => a.arm === arm)?.ttft_mean_ms ?? null })),
    })),
  });
}

/** 40 one-second requests at once over 8 slots of one node: through a gateway without the model vs straight to the executor. */
async function drainExperiment(dir: string, rounds: number): Promise<Record<string, unknown>> {
  const N = 40;
  const SLOTS = 8;
  const FIRST = 950; // + 5 tokens × 10 ms = 1 s in a slot
  const TOKENS = 5;
  const TOKEN_MS = 10;
  const [eh, ep] = [`127.0.${NET}.14`, 18804];
  const engineUrl = `http://${eh}:${ep}`;
  startProc('drain-engine', process.execPath, [path.join(HERE, 'fakes/slot-engine.mjs'), eh, String(ep), String(SLOTS), String(FIRST), String(TOKENS), String(TOKEN_MS)], { dir });
  await until(async () => (await getJson(`${engineUrl}/stats`)) !== undefined, 'drain engine up', 10_000);
  const exec = await startViiwork({ name: 'd-exec', ip: `127.0.${NET}.4`, apiPort: API_PORT, gossipPort: GOSSIP_PORT, models: [{ name: 'm', engine: 'openai', url: engineUrl, parallel: SLOTS }] }, dir);
  const gw = await startViiwork({ name: 'd-gateway', ip: `127.0.${NET}.5`, apiPort: API_PORT, gossipPort: GOSSIP_PORT, models: [], seeds: [`127.0.${NET}.4:${GOSSIP_PORT}`] }, dir);
  await waitConverged([exec, gw]);
  await waitFleet(gw, 'm', ['d-exec']);
  const body = JSON.stringify({ model: 'm', stream: true, max_tokens: 8, messages: [{ role: 'user', content: 'One second, please.' }] });
  const runs: Record<string, unknown>[] = [];
  const once = async (via: 'gateway' | 'direct') => {
    await until(async () => {
      const s = await getJson<{ busy: number; queued: number }>(`${engineUrl}/stats`);
      return s.busy === 0 && s.queued === 0;
    }, 'drain engine idle');
    await getJson(`${engineUrl}/stats/reset`);
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
    const outs = await Promise.all(Array.from({ length: N }, () => send(url, body, {}, t0)));
    const seconds = Math.max(...outs.map((o) => o.total ?? performance.now() - t0)) / 1000;
    const ok = outs.filter((o) => o.status === 200 && o.complete).length;
    const stats = await getJson<{ served: number; max_queued: number }>(`${engineUrl}/stats`);
    const r = { via, seconds: Math.round(seconds * 1000) / 1000, ok, engine_served: stats.served, engine_max_queued: stats.max_queued };
    console.log(`drain via ${via}: ${r.seconds} s, ${ok}/${N} ok`);
    runs.push(r);
  };
  for (let k = 0; k < rounds; k++) {
    await once('gateway');
    await once('direct');
  }
  const med = (via: string) => {
    const xs = runs.filter((x) => x.via === via).map((x) => x.seconds as number).sort((a, b) => a - b);
    return xs[Math.floor((xs.length - 1) / 2)];
  };
  const g = med('gateway');
  const d = med('direct');
  return { requests: N, slots: SLOTS, seconds_in_slot: (FIRST + TOKENS * TOKEN_MS) / 1000, ideal_s: (N / SLOTS) * ((FIRST + TOKENS * TOKEN_MS) / 1000), gateway_s: g, direct_s: d, gateway_vs_direct: Math.round((g / d) * 100) / 100, runs };
}

type Target = { target: string; measured: unknown; goal: string; met: boolean | null };

export function checkTargets(results: Record<string, any>[], drain: Record<string, any> | undefined, overload?: Record<string, any>): Target[] {
  const out: Target[] = [];
  const armAt = (load: number, arm: string) => results.find((r) => r.load === load)?.arms.find((a: any) => a.arm === arm);
  if (AGENTS) return agentTargets(armAt);
  if (MOONCAKE) return mooncakeTargets(armAt);
  const ratioTarget = (load: number, field: string, vs: string, limit: number, strict = false) => {
    const x = armAt(load, 'viiwork')?.[field];
    out.push({ target: `viiwork at ${Math.round(load * 100)}%: mean TTFT vs ${vs}`, measured: x ?? null, goal: `${strict ? '<' : '≤'} ${limit.toFixed(2)}`, met: x == null ? null : strict ? x < limit : x <= limit });
  };
  for (const load of [0.5, 0.8, 0.95]) ratioTarget(load, 'mean_vs_oracle', 'the oracle', 1.1);
  for (const load of [0.8, 0.95]) ratioTarget(load, 'mean_vs_least_conn', 'nginx least_conn', 0.8);
  for (const load of [0.5, 0.8, 0.95]) ratioTarget(load, 'mean_vs_sticky', 'the sticky reference router', 1, true);
  const v = armAt(0.8, 'viiwork');
  const within10 = (what: string, withH: number | null | undefined, without: number | null | undefined) => {
    const r = withH && without != null ? Math.round((without / withH) * 100) / 100 : null;
    out.push({ target: `viiwork at 80%: header-less conversations vs conversations with X-Session-Id, ${what}`, measured: r === null ? null : `${r} (${without} vs ${withH})`, goal: 'within 10%', met: r === null ? null : Math.abs(r - 1) <= 0.1 });
  };
  within10('mean TTFT', v?.classes?.conv_header?.ttft_mean_ms, v?.classes?.conv_noheader?.ttft_mean_ms);
  within10('cached share', v?.classes?.conv_header?.cached_share, v?.classes?.conv_noheader?.cached_share);
  const stayed = v?.stayed_on_host_share;
  out.push({ target: 'viiwork at 80%: later turns on the previous turn\'s engine', measured: stayed ?? null, goal: '≥ 0.70', met: stayed == null ? null : stayed >= 0.7 });
  const single = v?.classes?.single?.cached_share;
  const singleOracle = armAt(0.8, 'oracle')?.classes?.single?.cached_share;
  const singleRatio = single != null && singleOracle ? Math.round((single / singleOracle) * 100) / 100 : null;
  out.push({ target: 'viiwork at 80%: single shots sharing a system prompt, cached share vs the oracle', measured: singleRatio === null ? null : `${singleRatio} (${single} vs ${singleOracle})`, goal: '≥ 0.80', met: singleRatio === null ? null : singleRatio >= 0.8 });
  const pe = v?.prediction;
  out.push({ target: 'viiwork at 80%: predicted cached tokens vs the engines\' counts (mean absolute error over prompt tokens)', measured: pe ? `${pe.mae_share} (${pe.requests} requests)` : null, goal: '≤ 0.10', met: pe?.mae_share == null ? null : pe.mae_share <= 0.1 });
  const over = armAt(1.1, 'viiwork');
  out.push({ target: 'viiwork at 110%: nothing lost (every request 200, or 429/503 with Retry-After)', measured: over ? `${over.lost} lost of ${over.requests} (${over.ok} answered, ${over.shed_with_retry_after} refused with Retry-After)` : null, goal: '0 lost', met: over ? over.lost === 0 : null });
  if (overload) {
    const pctLoad = Math.round(overload.load * 100);
    out.push({ target: `viiwork at ${pctLoad}% (past capacity even with warm caches): overload refused with Retry-After, nothing lost`, measured: `${overload.lost} lost of ${overload.requests} (${overload.ok} answered, ${overload.shed_with_retry_after} refused with Retry-After: ${JSON.stringify(overload.statuses)})`, goal: '0 lost, > 0 refused', met: overload.lost === 0 && overload.shed_with_retry_after > 0 });
  }
  for (const load of [0.5, 0.8]) {
    const ss = armAt(load, 'viiwork')?.sessions;
    out.push({ target: `sessions at ${Math.round(load * 100)}%, three entry nodes: a later turn on its previous turn's host whenever that host had a free slot`, measured: ss ? `${ss.stayed_home_share} (${ss.stayed_home_then} of ${ss.later_turns_home_free}; ${ss.turns} session turns in all)` : null, goal: '≥ 0.95', met: ss?.stayed_home_share == null ? null : ss.stayed_home_share >= 0.95 });
  }
  out.push({ target: 'drain: 40 × 1 s over 8 remote slots, gateway vs direct', measured: drain?.gateway_vs_direct ?? null, goal: '≤ 1.15', met: drain?.gateway_vs_direct == null ? null : drain.gateway_vs_direct <= 1.15 });
  return out;
}

/** Issue 42's targets on Mooncake's conversation trace at 80%, by engine behaviour (with the RAM pool, or build 4748's). */
function mooncakeTargets(armAt: (load: number, arm: string) => Record<string, any> | undefined): Target[] {
  const v = armAt(0.8, 'viiwork');
  const [lc, st] = CACHE_RAM > 0 ? [0.7, 1] : [0.8, 0.95];
  const le = (what: string, x: number | null | undefined, goal: number, ge = false): Target => ({ target: `mooncake at 80%: viiwork ${what}`, measured: x ?? null, goal: `${ge ? '≥' : '≤'} ${goal.toFixed(2)}`, met: x == null ? null : ge ? x >= goal : x <= goal });
  return [le('mean TTFT vs nginx least_conn', v?.mean_vs_least_conn, lc), le('mean TTFT vs the prefix-sticky arm', v?.mean_vs_sticky, st), le('cached share of prompt tokens', v?.cached_share, 0.2, true)];
}

/** Issue 25's targets on the long-agent trace. */
function agentTargets(armAt: (load: number, arm: string) => Record<string, any> | undefined): Target[] {
  const out: Target[] = [];
  const v = armAt(0.8, 'viiwork');
  out.push({ target: 'agents at 80%: viiwork mean TTFT vs nginx least_conn', measured: v?.mean_vs_least_conn ?? null, goal: '≤ 0.45', met: v?.mean_vs_least_conn == null ? null : v.mean_vs_least_conn <= 0.45 });
  for (const load of [0.5, 0.8, 0.95]) {
    const x = armAt(load, 'viiwork')?.mean_vs_sticky;
    out.push({ target: `agents at ${Math.round(load * 100)}%: viiwork mean TTFT vs the sticky arm`, measured: x ?? null, goal: '≤ 1.00', met: x == null ? null : x <= 1 });
  }
  const lc = armAt(0.8, 'least_conn')?.cached_share;
  const share = v?.cached_share != null && lc ? Math.round((v.cached_share / lc) * 100) / 100 : null;
  out.push({ target: 'agents at 80%: cached share vs least_conn', measured: share === null ? null : `${share} (${v?.cached_share} vs ${lc})`, goal: '≥ 1.6', met: share === null ? null : share >= 1.6 });
  const h = v?.classes?.conv_header?.ttft_mean_ms;
  const n = v?.classes?.conv_noheader?.ttft_mean_ms;
  const r = h && n ? Math.round((n / h) * 100) / 100 : null;
  out.push({ target: 'agents at 80%: header-less sessions vs sessions with X-Session-Id, mean TTFT', measured: r === null ? null : `${r} (${n} vs ${h})`, goal: 'within 10%', met: r === null ? null : Math.abs(r - 1) <= 0.1 });
  const pe = v?.prediction;
  out.push({ target: 'agents at 80%: predicted cached tokens vs the engines\' counts (mean absolute error over prompt tokens)', measured: pe ? `${pe.mae_share} (${pe.requests} requests)` : null, goal: '≤ 0.10', met: pe?.mae_share == null ? null : pe.mae_share <= 0.1 });
  return out;
}

export function printRouting(doc: Record<string, any>): void {
  for (const s of doc.skipped ?? []) console.log(`skipped ${s.arm}: ${s.reason}`);
  console.log(`capacity ${doc.settings?.capacity_req_per_s} req/s`);
  const rows = [];
  for (const r of doc.results ?? []) {
    for (const a of r.arms) {
      rows.push({
        load: `${Math.round(r.load * 100)}% (${r.requests} in ${r.seconds}s)`,
        arm: a.arm,
        ok: a.ok,
        shed: a.shed_with_retry_after,
        lost: a.lost,
        'mean ms': a.ttft_mean_ms,
        'p50': a.ttft_p50_ms,
        'p95': a.ttft_p95_ms,
        'p99': a.ttft_p99_ms,
        goodput: a.goodput_req_per_s,
        cached: a.cached_share,
        'cached hdr/no': `${a.classes?.conv_header?.cached_share}/${a.classes?.conv_noheader?.cached_share}`,
        stayed: a.classes?.conv_noheader?.stayed_on_host_share,
        '÷oracle': a.mean_vs_oracle,
        '÷lc': a.mean_vs_least_conn,
        '÷sticky': a.mean_vs_sticky,
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
  console.log(`machine: ${doc.cpus} × ${doc.cpu_model}, ${doc.mem_gb} GB, ${doc.node}, commit ${String(doc.git_commit).slice(0, 10)}${doc.git_src_dirty ? ' (+uncommitted src changes)' : ''}, load at start ${doc.loadavg_at_start}; took ${doc.duration_s} s`);
}
