/**
 * Issue 43's rolling-restart target (SPEC 13): a 3-node mesh under an agent
 * trace, each node in turn drained, stopped, started again on the same
 * config file and state_dir, and ready again before the next. Targets:
 * nothing lost, and ≥ 80% of the later turns whose previous turn's host was
 * restarted in between find their cache (the engine's cached tokens ≥ 90%
 * of the previous turn's prompt).
 *
 * The mesh: A, B, C (`viiwork serve`, real processes, 127.0.218.1-3), each
 * running the real llama-server (`npm run engine`) on the "mid" GGUF our own
 * code writes (4 layers, n_embd 512, F32: a prefill of 1k tokens on one
 * thread takes about a second, as a small real model on a CPU host),
 * `--threads 1`, 2 slots of 4,096 tokens, the product's defaults otherwise
 * (mesh polling, cache_disk 4 GiB, drain_timeout 60 s, the engine's RAM
 * prompt cache). Clients enter through G (127.0.218.10, a node with no
 * models, never restarted: the fleet's one endpoint, as a load balancer's
 * address would be).
 *
 * The trace: RESTART_CONVERSATIONS (6) agent conversations at once, each a
 * system prompt of about 1,000 tokens of its own and a first user message;
 * every turn appends the assistant's answer and a new user message of about
 * 60 tokens to the previous prompt and waits 2–4 s (seeded) before the
 * next; a conversation past RESTART_MAX_TOKENS (2,000) prompt tokens ends
 * and a new one begins. Streamed, `max_tokens` 8, temperature 0. No session
 * header unless RESTART_SESSION_HEADER=1 (then `x-session-id` per
 * conversation). A, then B, then C, RESTART_ROUNDS (3) times over; the
 * drains alternate between `viiwork drain --url …` (which returns once the
 * node has exited) and SIGTERM to the node's process (steps 1, 3, 5, …).
 * RESTART_WARM_S (20) of trace before the first drain, RESTART_SETTLE_S (15)
 * after each node is ready again.
 *
 * At the end, quiet: for each turn counted above, a cold prefill of a
 * prompt of the same size (its first character changed, so no host holds
 * any prefix of it) pinned to the host that ran the turn.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { Agent, request } from 'undici';
import { machineInfo, scratchDir, stopAllProcs, until } from './lib/procs.ts';
import { getJson, startViiwork, VIIWORK_ROOT, type BenchNode, type BenchNodeSpec } from './lib/viiwork.ts';
import { writeTinyGguf } from '../test/fakes/tiny-gguf.ts';
import { realLlamaServer } from '../test/helpers/engine.ts';
import { seeded } from '../test/helpers/random.ts';

const IP = (n: number) => `127.0.218.${n}`;
const run = promisify(execFile);
type Msg = { role: string; content: string };

export interface TurnRec {
  conv: number;
  turn: number;
  t0: number;
  t1: number;
  host: string;
  status: number;
  ok: boolean;
  error?: string;
  ttft_ms: number;
  prompt: number;
  cached: number;
  /** The previous turn of the conversation (undefined for a first turn). */
  prev?: { host: string; t0: number; prompt: number };
}

export interface RestartRec {
  node: string;
  how: 'viiwork drain' | 'SIGTERM';
  drain_at: number;
  exited_at: number;
  exit_code: number | null;
  ready_at: number;
  /** From the node's log: conversations it handed to members while draining, slots saved on stop, slots restored on start. */
  handed: number;
  saved: number;
  restored: number;
}

interface Stream {
  status: number;
  ok: boolean;
  error?: string;
  ttftMs: number;
  prompt: number;
  cached: number;
  reply: string;
  host: string;
}

const dispatcher = new Agent({ connections: 64, headersTimeout: 300_000, bodyTimeout: 300_000 });

/** One streamed chat turn through `url`: its status, whether it ended whole ([DONE], no error event), the client's TTFT and the engine's usage. */
async function streamTurn(url: string, messages: Msg[], opts: { host?: string; session?: string; maxTokens?: number } = {}): Promise<Stream> {
  const t0 = performance.now();
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (opts.session) headers['x-session-id'] = opts.session;
  const body = { model: 'tiny', messages, max_tokens: opts.maxTokens ?? 8, temperature: 0, grammar: 'root ::= [a-z ]+', stream: true, stream_options: { include_usage: true } };
  const out: Stream = { status: 0, ok: false, ttftMs: 0, prompt: 0, cached: 0, reply: '', host: '' };
  try {
    const r = await request(`${url}/v1/chat/completions${opts.host ? `?host=${opts.host}` : ''}`, { method: 'POST', dispatcher, headers, body: JSON.stringify(body) });
    out.status = r.statusCode;
    out.host = String(r.headers['x-viiwork-node'] ?? '');
    let text = '';
    let all = '';
    let done = false;
    let errored = false;
    for await (const chunk of r.body) {
      text += String(chunk);
      if (r.statusCode !== 200) continue;
      let i;
      while ((i = text.indexOf('\n\n')) >= 0) {
        const ev = text.slice(0, i);
        text = text.slice(i + 2);
        if (/^event: error/m.test(ev)) errored = true;
        const data = ev.replace(/^[\s\S]*?data: /, '');
        if (data === '[DONE]') done = true;
        if (!data.startsWith('{')) continue;
        const doc = JSON.parse(data);
        if (doc.error) errored = true;
        const c = doc.choices?.[0]?.delta?.content;
        if (c) {
          if (!out.reply) out.ttftMs = performance.now() - t0;
          out.reply += c;
        }
        if (doc.usage) {
          out.prompt = doc.usage.prompt_tokens ?? 0;
          out.cached = doc.usage.prompt_tokens_details?.cached_tokens ?? 0;
        }
      }
      all += String(chunk).slice(0, 300);
    }
    out.ok = r.statusCode === 200 && done && !errored;
    if (!out.ok) out.error = `${r.statusCode}${done ? '' : ' no [DONE]'}${errored ? ' error event' : ''}: ${(r.statusCode === 200 ? all : text).slice(0, 300)}`;
    if (!out.ttftMs) out.ttftMs = performance.now() - t0;
  } catch (err) {
    out.error = `no answer: ${(err as Error).message}`;
  }
  return out;
}

/** A conversation's opening: about 1,000 tokens of system prompt of its own (the tiny vocabulary spells most text a character a token). */
function opening(id: number): Msg[] {
  const log = Array.from({ length: 30 }, (_, i) => `Task ${id}, step ${i + 1}: read the file, ran the tests, noted what failed. `).join('').slice(0, 1000);
  return [
    { role: 'system', content: `You are agent ${id}, a coding assistant. ${log}` },
    { role: 'user', content: `Task ${id}: fix the failing test in module ${id % 7}.` },
  ];
}

const followUps = ['The test still fails: the assertion on line 40 expects two items.', 'Now run the linter over the changed files and fix what it finds.', 'Read the config loader and tell me where the default is set.', 'Good. Add a test for the empty input, then run the suite again.', 'The build broke on the type check; the field is optional there.'];

export interface TraceOpts {
  url: string;
  conversations: number;
  maxTokens: number;
  session: boolean;
  rng: () => number;
  clock0: number;
}

/** The agent trace: `conversations` workers until `stop()`; every turn recorded. */
export function startTrace(o: TraceOpts): { turns: TurnRec[]; stop(): Promise<void> } {
  const turns: TurnRec[] = [];
  let stopping = false;
  let nextId = 0;
  const now = () => Math.round(performance.now() - o.clock0);
  const worker = async (k: number) => {
    // Staggered starts, so the first prefills do not all land at once.
    await sleep(k * 700);
    while (!stopping) {
      const id = nextId++;
      let messages = opening(id);
      let prev: TurnRec['prev'];
      for (let turn = 0; !stopping; turn++) {
        const t0 = now();
        const s = await streamTurn(o.url, messages, o.session ? { session: `agent-${id}` } : {});
        const rec: TurnRec = { conv: id, turn, t0, t1: now(), host: s.host, status: s.status, ok: s.ok, ttft_ms: Math.round(s.ttftMs), prompt: s.prompt, cached: s.cached, ...(s.error ? { error: s.error } : {}), ...(prev ? { prev } : {}) };
        turns.push(rec);
        if (!s.ok) break; // a lost turn ends its conversation (it is counted); a new one begins
        prev = { host: s.host, t0, prompt: s.prompt };
        if (s.prompt > o.maxTokens) break;
        messages = [...messages, { role: 'assistant', content: s.reply }, { role: 'user', content: `${followUps[(id + turn) % followUps.length]} (turn ${turn + 2})` }];
        await sleep(2000 + 2000 * o.rng());
      }
    }
  };
  const workers = Array.from({ length: o.conversations }, (_, k) => worker(k));
  return {
    turns,
    async stop() {
      stopping = true;
      await Promise.all(workers);
    },
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls each node's decision feed every second until stopped; records deduplicated, each with the node it came from and its bench time. */
function startFeeds(nodes: { name: string; url: string }[], wallAt0: () => number): { records: Record<string, unknown>[]; stop(): Promise<void> } {
  const seen = new Set<string>();
  const records: Record<string, unknown>[] = [];
  let stopping = false;
  const once = async () => {
    for (const n of nodes) {
      try {
        const doc = await getJson(`${n.url}/v1/decisions?since=0`);
        for (const d of doc.data as Record<string, unknown>[]) {
          const k = `${n.name}:${d.seq}:${d.at}`;
          if (seen.has(k)) continue;
          seen.add(k);
          records.push({ node: n.name, ...d, bench_ms: Number(d.at) - wallAt0() });
        }
      } catch {
        // restarting: its feed is read again when it is back
      }
    }
  };
  const loop = (async () => {
    while (!stopping) {
      await once();
      await sleep(1000);
    }
    await once();
  })();
  return {
    records,
    async stop() {
      stopping = true;
      await loop;
      records.sort((a, b) => Number(a.at) - Number(b.at));
    },
  };
}

/** Until G's fleet shows `host` serving `tiny` fresh, not draining, with slots and its file hashed. */
async function ready(g: BenchNode, host: string, timeoutMs = 120_000): Promise<void> {
  await until(
    async () => {
      const m = (await getJson(`${g.url}/v1/fleet/capacity`)).models.find((x: any) => x.name === 'tiny');
      return !!m?.hosts.some((h: any) => h.node === host && h.fresh && !h.draining && h.slots > 0 && h.has_file === true);
    },
    `G sees tiny ready on ${host}`,
    timeoutMs,
    100,
  );
}

const countIn = (text: string, re: RegExp) => [...text.matchAll(re)].reduce((n, m) => n + Number(m[1]), 0);

export async function benchRestart(): Promise<Record<string, unknown>> {
  const conversations = Number(process.env.RESTART_CONVERSATIONS ?? 6);
  const maxTokens = Number(process.env.RESTART_MAX_TOKENS ?? 2000);
  const session = process.env.RESTART_SESSION_HEADER === '1';
  const warmS = Number(process.env.RESTART_WARM_S ?? 20);
  const settleS = Number(process.env.RESTART_SETTLE_S ?? 15);
  const rounds = Number(process.env.RESTART_ROUNDS ?? 3);
  const engine = realLlamaServer();
  if (engine.skip) throw new Error(engine.skip);
  const dir = scratchDir('viiwork-bench-restart-');
  console.log(`# logs and state under ${dir}`);
  const file = writeTinyGguf(path.join(dir, 'mid.gguf'), { nEmbd: 512, nLayers: 4, nHeads: 8, nFf: 4096, contextLength: 4096, seed: 1 });
  const entry = { name: 'tiny', engine: 'llamacpp', path: file, parallel: 2, context: 4096, llamacpp: { binary: engine.binary, args: ['--threads', '1'] } };
  const gSpec: BenchNodeSpec = { name: 'G', ip: IP(10), apiPort: 8086, gossipPort: 7946 };
  const specs: BenchNodeSpec[] = ['A', 'B', 'C'].map((name, i) => ({ name, ip: IP(i + 1), apiPort: 8086, gossipPort: 7946, models: [entry], seeds: [`${IP(10)}:7946`] }));
  const clock0 = performance.now();
  const now = () => Math.round(performance.now() - clock0);
  const restarts: RestartRec[] = [];
  let trace: ReturnType<typeof startTrace> | undefined;
  try {
    const g = await startViiwork(gSpec, dir);
    const nodes = await Promise.all(specs.map((s) => startViiwork(s, dir)));
    for (const n of nodes) await ready(g, n.name);
    // One throwaway turn on each: the engines' first requests warm their buffers.
    for (const n of nodes) await streamTurn(g.url, [{ role: 'user', content: `warm ${n.name}` }], { host: n.name });
    // Every node's decision feed, kept as it goes (a restarted executor's feed starts again; G's ring holds 200).
    const feeds = startFeeds([g, ...nodes.map((n) => ({ name: n.name, url: n.url }))], () => Date.now() - now());
    trace = startTrace({ url: g.url, conversations, maxTokens, session, rng: seeded(43), clock0 });
    await sleep(warmS * 1000);
    for (let step = 0; step < rounds * nodes.length; step++) {
      const i = step % nodes.length;
      const old = nodes[i];
      const how = step % 2 === 1 ? 'SIGTERM' : 'viiwork drain';
      const logAt = fs.statSync(old.proc.logFile).size;
      const drainAt = now();
      console.log(`# ${now()} ms: ${how} ${old.name}`);
      if (how === 'SIGTERM') process.kill(old.proc.pid, 'SIGTERM');
      else await run(process.execPath, [path.join(VIIWORK_ROOT, 'bin/viiwork.js'), 'drain', '--url', old.url], { timeout: 180_000 });
      const code = await Promise.race([old.proc.exited, sleep(180_000).then(() => 'timeout' as const)]);
      if (code === 'timeout') throw new Error(`${old.name} did not exit within 180 s of its drain`);
      const exitedAt = now();
      const drainLog = fs.readFileSync(old.proc.logFile, 'utf8').slice(logAt);
      nodes[i] = await startViiwork(specs[i], dir);
      await ready(g, old.name);
      const readyAt = now();
      const startLog = fs.readFileSync(old.proc.logFile, 'utf8').slice(logAt + drainLog.length);
      const rec: RestartRec = {
        node: old.name,
        how,
        drain_at: drainAt,
        exited_at: exitedAt,
        exit_code: code,
        ready_at: readyAt,
        handed: countIn(drainLog, /handed (\d+) conversation\(s\)/g),
        saved: countIn(drainLog, /saved (\d+) slot\(s\)/g),
        restored: countIn(startLog, /restored (\d+) slot\(s\)/g),
      };
      restarts.push(rec);
      console.log(JSON.stringify(rec));
      await sleep(settleS * 1000);
    }
    await trace.stop();
    const turns = trace.turns;
    trace = undefined;
    const report = analyse(turns, restarts);
    // The entry's own record of each choice (route, predicted cached tokens): why a turn went where it went.
    await feeds.stop();
    const entryFeed = feeds.records.filter((d) => d.node === 'G');
    const executorFeed = feeds.records.filter((d) => d.node !== 'G' && d.executor === d.node);
    // Cold prefills of the same sizes, quiet, pinned to the host that ran each counted turn.
    const cold: { host: string; prompt: number; cached: number; ttft_ms: number }[] = [];
    for (const t of report.affected) {
      if (!t.ok) continue;
      const msgs = coldOf(t);
      const s = await streamTurn(g.url, msgs, { host: t.host, maxTokens: 1 });
      if (s.ok) cold.push({ host: t.host, prompt: s.prompt, cached: s.cached, ttft_ms: Math.round(s.ttftMs) });
    }
    const logs = Object.fromEntries(nodes.map((n) => [n.name, fs.readFileSync(n.proc.logFile, 'utf8')]));
    return {
      ...machineInfo(),
      setup: { rounds, conversations, max_prompt_tokens: maxTokens, session_header: session, warm_s: warmS, settle_s: settleS, model: 'mid GGUF (4 layers, n_embd 512, F32)', parallel: 2, context_per_slot: 4096, threads: 1, dir },
      restarts,
      ...report.summary,
      cold_prefill: summariseCold(report.affected, cold),
      moves_in_logs: {
        restored_from_members: Object.fromEntries(Object.entries(logs).map(([k, v]) => [k, (v.match(/cache move: restored \d+ tokens/g) ?? []).length])),
      },
      target: 'nothing lost; ≥ 80% of later turns whose previous turn’s host restarted find their cache (cached ≥ 90% of the previous prompt)',
      turns,
      entry_decisions: entryFeed,
      executor_decisions: executorFeed,
    };
  } finally {
    await trace?.stop();
    await stopAllProcs();
  }
}

/** The prompt a counted turn sent, rebuilt by its size only: a cold one of about the same number of tokens. */
function coldOf(t: TurnRec): Msg[] {
  // The tiny vocabulary spells about a character a token; the chat template adds a few dozen.
  const n = Math.max(100, t.prompt - 40);
  const text = Array.from({ length: Math.ceil(n / 60) }, (_, i) => `Cold ${t.conv}.${t.turn} line ${i}: nothing of this is cached anywhere. `).join('').slice(0, n);
  return [{ role: 'user', content: `Z${text}` }];
}

/** The later turns whose previous turn's host was drained between the two turns, and what they found. */
export function analyse(turns: TurnRec[], restarts: RestartRec[]) {
  const found = (t: TurnRec) => !!t.prev && t.ok && t.cached >= 0.9 * t.prev.prompt;
  const restartOf = (t: TurnRec) => (t.prev ? restarts.find((r) => r.node === t.prev!.host && r.drain_at > t.prev!.t0 && r.drain_at < t.t0) : undefined);
  const affected = turns.filter((t) => restartOf(t));
  const down = affected.filter((t) => t.t0 < restartOf(t)!.ready_at);
  const back = affected.filter((t) => t.t0 >= restartOf(t)!.ready_at);
  const others = turns.filter((t) => t.prev && !restartOf(t));
  // A restart under way (drain to ready) when the turn began: hand-offs into members' slots happen then.
  const inWindow = (t: TurnRec) => restarts.some((r) => t.t0 >= r.drain_at && t.t0 < r.ready_at + 5000);
  // Other conversations that ran on the previous host between the previous turn and the drain: with 2 slots, 2 or more may have displaced it before the drain.
  const between = (t: TurnRec) => {
    const r = restartOf(t)!;
    return new Set(turns.filter((x) => x.conv !== t.conv && x.host === t.prev!.host && x.t0 > t.prev!.t0 && x.t0 < r.drain_at).map((x) => x.conv)).size;
  };
  const share = (xs: TurnRec[]) => (xs.length ? +(xs.filter(found).length / xs.length).toFixed(3) : null);
  const lost = turns.filter((t) => !t.ok);
  const median = (xs: number[]) => (xs.length ? [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] : null);
  return {
    affected,
    summary: {
      sent: turns.length,
      answered_200: turns.filter((t) => t.status === 200).length,
      whole: turns.filter((t) => t.ok).length,
      lost: lost.length,
      lost_detail: lost.map((t) => ({ conv: t.conv, turn: t.turn, at: t.t0, error: t.error })),
      later_turns: turns.filter((t) => t.prev).length,
      after_restart: {
        turns: affected.length,
        found_cache: affected.filter(found).length,
        share: share(affected),
        while_host_down: { turns: down.length, found_cache: down.filter(found).length, share: share(down) },
        after_host_back: { turns: back.length, found_cache: back.filter(found).length, share: share(back) },
        on_previous_host: affected.filter((t) => t.host === t.prev!.host).length,
        detail: affected.map((t) => ({ conv: t.conv, turn: t.turn, at: t.t0, prev_host: t.prev!.host, host: t.host, prev_prompt: t.prev!.prompt, prompt: t.prompt, cached: t.cached, found: found(t), ttft_ms: t.ttft_ms, others_on_prev_host_before_drain: between(t), host_state: t.t0 < restartOf(t)!.ready_at ? 'down' : 'back' })),
      },
      other_later_turns: {
        turns: others.length,
        found_cache: others.filter(found).length,
        share: share(others),
        median_ttft_ms: median(others.filter(found).map((t) => t.ttft_ms)),
        during_a_restart: { turns: others.filter(inWindow).length, found_cache: others.filter(inWindow).filter(found).length, share: share(others.filter(inWindow)) },
        quiet: { turns: others.filter((t) => !inWindow(t)).length, found_cache: others.filter((t) => !inWindow(t)).filter(found).length, share: share(others.filter((t) => !inWindow(t))) },
      },
      executors: turns.reduce<Record<string, number>>((m, t) => ((m[t.host || 'none'] = (m[t.host || 'none'] ?? 0) + 1), m), {}),
    },
  };
}

function summariseCold(affected: TurnRec[], cold: { prompt: number; cached: number; ttft_ms: number }[]) {
  const median = (xs: number[]) => (xs.length ? [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] : null);
  const warm = affected.filter((t) => t.ok && t.prev && t.cached >= 0.9 * t.prev.prompt);
  const missed = affected.filter((t) => t.ok && t.prev && t.cached < 0.9 * t.prev.prompt);
  const warmMs = median(warm.map((t) => t.ttft_ms));
  const coldMs = median(cold.map((c) => c.ttft_ms));
  return {
    runs: cold.length,
    median_prompt: median(cold.map((c) => c.prompt)),
    max_cached: Math.max(0, ...cold.map((c) => c.cached)),
    median_ttft_ms: coldMs,
    found_median_ttft_ms: warmMs,
    missed_median_ttft_ms: median(missed.map((t) => t.ttft_ms)),
    found_over_cold: warmMs !== null && coldMs ? +(warmMs / coldMs).toFixed(3) : null,
  };
}

export function printRestart(doc: Record<string, any>): void {
  console.table(doc.restarts);
  const a = doc.after_restart;
  console.log(`sent ${doc.sent}, answered 200 ${doc.answered_200}, whole ${doc.whole}, lost ${doc.lost}`);
  console.log(`later turns after their host restarted: ${a.found_cache}/${a.turns} found their cache (${a.share}); host down ${a.while_host_down.found_cache}/${a.while_host_down.turns}, host back ${a.after_host_back.found_cache}/${a.after_host_back.turns}`);
  const o = doc.other_later_turns;
  console.log(`other later turns: ${o.found_cache}/${o.turns} (${o.share}); during a restart ${o.during_a_restart.found_cache}/${o.during_a_restart.turns}, quiet ${o.quiet.found_cache}/${o.quiet.turns}`);
  console.log(`TTFT: found ${doc.cold_prefill.found_median_ttft_ms} ms, missed ${doc.cold_prefill.missed_median_ttft_ms} ms, cold prefill ${doc.cold_prefill.median_ttft_ms} ms (median prompt ${doc.cold_prefill.median_prompt}); found ÷ cold ${doc.cold_prefill.found_over_cold}`);
}
