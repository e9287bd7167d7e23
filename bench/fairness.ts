/**
 * Issue 26: a fleet a team shares. Three sim nodes (127.0.78.1-3, secured
 * mesh), one model `fair` of 4 slots on each (12 in all), every arm on a
 * fresh fleet.
 *
 * Sessions run: two interactive keys each run FAIRNESS_SESSIONS agent
 * sessions (streamed turns with X-Session-Id and a growing conversation,
 * 100 ms think time), entering the three nodes in turn, for FAIRNESS_S
 * seconds. Arms:
 *   alone      the sessions alone on the fleet (keys on)
 *   fifo       the sessions beside a flood of 64 concurrent requests through
 *              all three entry nodes, no keys: one FIFO queue (before issue 26)
 *   fair-entry the same flood from a batch key (priority batch) beside the
 *              interactive keys, fair queues per entry node only
 *              (routing.forward_wait 0: a forward never waits at a full
 *              executor, as before the gate)
 *   fair       the same, with the gate (queue/gate.ts): keyed forwards may
 *              wait in a full executor's line, ordered there by band and key
 *              together with its own waiters
 * Per arm: the interactive sessions' mean/p95 TTFT (first content chunk),
 * refused turns, and each key's share of the tokens served.
 *
 * Shares run: two keys of weight 1 and 3, both interactive, each keeping 32
 * requests in flight (backlogged) for FAIRNESS_S seconds: each key's share of
 * the completion tokens served, against 1:3; once per entry only
 * (forward_wait 0) and once with the gate.
 *
 * Limits run: one key with tpm 60000, hit from the three entry nodes at
 * once (8 requests in flight through each) for FAIRNESS_LIMIT_S seconds
 * (120): tokens admitted per minute (prompt + completion of the answers
 * whose request started in that minute) against the limit.
 *
 * Admission: the CPU one request's key check, scope check and limiter
 * admission take on an entry node, measured in-process over 50,000 calls
 * (keys on: a table key with limits, owner local; off: no keys).
 *
 * Env: FAIRNESS_S (30), FAIRNESS_LIMIT_S (120), FAIRNESS_SESSIONS (2),
 * FAIRNESS_ONLY (comma list of sessions, shares, limits, admission).
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Agent, request } from 'undici';
import { allowsModel, Keyring } from '../src/keys/access.ts';
import { Limiter } from '../src/keys/limiter.ts';
import { KeyTable } from '../src/keys/table.ts';
import { machineInfo, scratchDir, stopProc, until as waitUntil } from './lib/procs.ts';
import { startViiwork, type BenchNode } from './lib/viiwork.ts';

const S = Number(process.env.FAIRNESS_S ?? 30);
const LIMIT_S = Number(process.env.FAIRNESS_LIMIT_S ?? 120);
const SESSIONS = Number(process.env.FAIRNESS_SESSIONS ?? 2);
/** routing.interactive_reserve for every node (default: the product's). */
const RESERVE = process.env.FAIRNESS_RESERVE !== undefined ? Number(process.env.FAIRNESS_RESERVE) : undefined;
const ONLY = new Set((process.env.FAIRNESS_ONLY ?? 'sessions,shares,limits,admission').split(','));
const API = 18086;
const GOSSIP = 17946;
const IP = (n: number) => `127.0.78.${n}`;
const agent = new Agent({ connections: 256, pipelining: 1 });
const sha = (s: string) => crypto.createHash('sha256').update(s).digest('hex');
const SIM = { ttft_ms: 60, prefill_ms_per_1k: 40, tokens_per_s: 200, output_tokens: 32 };

interface KeySpec {
  name: string;
  role?: 'user' | 'admin';
  priority?: 'interactive' | 'batch';
  weight?: number;
  limits?: Record<string, number>;
}

/** A fresh three-node fleet with these keys (none: keys off). Returns the nodes, the keys' secrets, and a stop. */
async function fleet(keys: KeySpec[], routing: Record<string, unknown> = {}): Promise<{ nodes: BenchNode[]; secret: Record<string, string>; stop(): Promise<void> }> {
  const dir = scratchDir('viiwork-fairness-');
  const secret: Record<string, string> = {};
  let keysFile: string | undefined;
  if (keys.length) {
    keys = [...keys, { name: 'ops', role: 'admin' }];
    for (const k of keys) secret[k.name] = `vk-${crypto.randomBytes(16).toString('hex')}`;
    keysFile = path.join(dir, 'keys.yaml');
    const lines = keys.map((k) => `  - name: ${k.name}\n    sha256: ${sha(secret[k.name])}\n    role: ${k.role ?? 'user'}\n    priority: ${k.priority ?? 'interactive'}\n    weight: ${k.weight ?? 1}\n${k.limits ? `    limits: ${JSON.stringify(k.limits)}\n` : ''}`);
    fs.writeFileSync(keysFile, `keys:\n${lines.join('')}`, { mode: 0o600 });
  }
  const meshSecret = crypto.randomBytes(32).toString('base64');
  const nodes: BenchNode[] = [];
  for (let i = 1; i <= 3; i++) {
    nodes.push(
      await startViiwork(
        {
          name: `f${i}`,
          ip: IP(i),
          apiPort: API,
          gossipPort: GOSSIP,
          secret: meshSecret,
          seeds: i > 1 ? [`${IP(1)}:${GOSSIP}`] : [],
          mesh: { capacity_poll: '250ms' },
          routing: { queue_max: 256, queue_timeout: '60s', ...(RESERVE !== undefined ? { interactive_reserve: RESERVE } : {}), ...routing },
          api: keysFile ? { keys_file: keysFile } : {},
          models: [{ name: 'fair', engine: 'sim', parallel: 4, sim: SIM }],
        },
        dir,
      ),
    );
  }
  const admin: Record<string, string> = keys.length ? { authorization: `Bearer ${secret.ops}` } : {};
  // Every node knows the keys and routes to every host with a fresh report.
  for (const n of nodes) {
    await waitUntil(
      async () => {
        const r = await request(`${n.url}/v1/fleet/capacity`, { headers: admin });
        const doc = r.statusCode === 200 ? ((await r.body.json()) as { models: { name: string; hosts: { node: string; fresh: boolean }[] }[] }) : (await r.body.text(), undefined);
        const m = doc?.models.find((x) => x.name === 'fair');
        return !!m && ['f1', 'f2', 'f3'].every((h) => m.hosts.some((x) => x.node === h && x.fresh));
      },
      `${n.name} sees the fleet`,
      30_000,
      100,
    );
  }
  return { nodes, secret, stop: async () => void (await Promise.all(nodes.map((n) => stopProc(n.proc)))) };
}

interface Answer {
  status: number;
  ttft?: number;
  tokens: number;
  completion: number;
  startedAt: number;
}

async function chatStream(url: string, key: string | undefined, messages: { role: string; content: string }[], headers: Record<string, string> = {}, maxTokens = 32): Promise<Answer> {
  const t0 = performance.now();
  const startedAt = Date.now();
  const body = JSON.stringify({ model: 'fair', stream: true, stream_options: { include_usage: true }, max_tokens: maxTokens, messages });
  try {
    const res = await request(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}), ...headers },
      body,
      dispatcher: agent,
    });
    if (res.statusCode !== 200) {
      await res.body.text();
      return { status: res.statusCode, tokens: 0, completion: 0, startedAt };
    }
    let ttft: number | undefined;
    let text = '';
    for await (const chunk of res.body) {
      const s = (chunk as Buffer).toString('utf8');
      if (ttft === undefined && s.includes('"content"')) ttft = performance.now() - t0;
      text += s;
      if (text.length > 200_000) text = text.slice(-20_000);
    }
    const m = /"prompt_tokens":(\d+),"completion_tokens":(\d+)/.exec(text) ?? /"completion_tokens":(\d+)/.exec(text);
    const prompt = m && m.length === 3 ? Number(m[1]) : 0;
    const completion = m ? Number(m[m.length - 1]) : 0;
    return { status: 200, ttft, tokens: prompt + completion, completion, startedAt };
  } catch {
    return { status: 0, tokens: 0, completion: 0, startedAt };
  }
}

/** The machine is shared: each arm says how loaded it was when it ended (1, 5, 15 minute averages). */
const loadavg = () => os.loadavg().map((x) => +x.toFixed(2));
const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : NaN);
const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor(p * s.length))] : NaN;
};

/** One agent session: turns until `until`, a growing conversation, 100 ms between turns. */
async function session(nodes: BenchNode[], key: string | undefined, id: string, until: number, out: Answer[]): Promise<void> {
  const messages = [{ role: 'system', content: `You are agent ${id}. ${'Tools and rules. '.repeat(60)}` }];
  let turn = 0;
  while (Date.now() < until) {
    messages.push({ role: 'user', content: `turn ${turn} of ${id}: ${'context '.repeat(20)}` });
    const a = await chatStream(nodes[turn % 3].url, key, messages, { 'x-session-id': id });
    out.push(a);
    messages.push({ role: 'assistant', content: 'ok '.repeat(16) });
    turn++;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** `n` requests in flight from `key` through the nodes in turn until `until`. */
async function flood(nodes: BenchNode[], key: string | undefined, n: number, until: number, out: Answer[], headers: Record<string, string> = {}, maxTokens = 64): Promise<void> {
  await Promise.all(
    Array.from({ length: n }, async (_, i) => {
      let j = i;
      while (Date.now() < until) {
        const a = await chatStream(nodes[j++ % 3].url, key, [{ role: 'user', content: `batch item ${i}-${j}: ${'data '.repeat(100)}` }], headers, maxTokens);
        out.push(a);
        if (a.status !== 200) await new Promise((r) => setTimeout(r, 50));
      }
    }),
  );
}

function sessionStats(answers: Answer[]) {
  const ok = answers.filter((a) => a.status === 200 && a.ttft !== undefined);
  const t = ok.map((a) => a.ttft!);
  return { turns: answers.length, refused: answers.filter((a) => a.status !== 200).length, ttft_mean_ms: Math.round(mean(t)), ttft_p95_ms: Math.round(pct(t, 0.95)) };
}

async function sessionsRun() {
  const out: Record<string, unknown> = {};
  for (const arm of ['alone', 'fifo', 'fair-entry', 'fair'] as const) {
    const keys: KeySpec[] = arm === 'fifo' ? [] : [{ name: 'agent-a' }, { name: 'agent-b' }, { name: 'batch', priority: 'batch' }];
    const f = await fleet(keys, arm === 'fair-entry' ? { forward_wait: 0 } : { forward_wait: '2s' });
    try {
      const until = Date.now() + S * 1000;
      const interactive: Answer[] = [];
      const batch: Answer[] = [];
      const byKey: Record<string, Answer[]> = { 'agent-a': [], 'agent-b': [] };
      const runs: Promise<void>[] = [];
      for (const k of ['agent-a', 'agent-b']) for (let s = 0; s < SESSIONS; s++) runs.push(session(f.nodes, f.secret[k], `${arm}-${k}-${s}`, until, byKey[k]));
      if (arm !== 'alone') runs.push(flood(f.nodes, f.secret.batch, 64, until, batch));
      await Promise.all(runs);
      interactive.push(...byKey['agent-a'], ...byKey['agent-b']);
      const tokens = (xs: Answer[]) => xs.reduce((n, a) => n + a.tokens, 0);
      const all = tokens(interactive) + tokens(batch);
      out[arm] = {
        interactive: sessionStats(interactive),
        batch: { requests: batch.length, served: batch.filter((a) => a.status === 200).length },
        token_share: { interactive: +(tokens(interactive) / all).toFixed(3), batch: +(tokens(batch) / all).toFixed(3) },
        loadavg_at_end: loadavg(),
      };
      console.log(arm, JSON.stringify(out[arm]));
    } finally {
      await f.stop();
    }
  }
  const alone = (out.alone as { interactive: { ttft_mean_ms: number } }).interactive.ttft_mean_ms;
  for (const arm of ['fifo', 'fair-entry', 'fair']) (out[arm] as Record<string, unknown>).ttft_vs_alone = +((out[arm] as { interactive: { ttft_mean_ms: number } }).interactive.ttft_mean_ms / alone).toFixed(2);
  return out;
}

async function sharesRun() {
  return { per_entry: await sharesArm({ forward_wait: 0 }), gate: await sharesArm({ forward_wait: '2s' }) };
}

async function sharesArm(routing: Record<string, unknown>) {
  const f = await fleet([{ name: 'w1', weight: 1 }, { name: 'w3', weight: 3 }], routing);
  try {
    const until = Date.now() + S * 1000;
    const w1: Answer[] = [];
    const w3: Answer[] = [];
    await Promise.all([flood(f.nodes, f.secret.w1, 32, until, w1), flood(f.nodes, f.secret.w3, 32, until, w3)]);
    const c = (xs: Answer[]) => xs.reduce((n, a) => n + a.completion, 0);
    const share = c(w3) / (c(w1) + c(w3));
    const out = { w1_completion_tokens: c(w1), w3_completion_tokens: c(w3), w3_share: +share.toFixed(3), target_share: 0.75, ratio: +(c(w3) / Math.max(1, c(w1))).toFixed(2), loadavg_at_end: loadavg() };
    console.log('shares', JSON.stringify(routing), JSON.stringify(out));
    return out;
  } finally {
    await f.stop();
  }
}

async function limitsRun() {
  const limit = 60_000;
  const f = await fleet([{ name: 'capped', limits: { tpm: limit } }]);
  try {
    const t0 = Date.now();
    const until = t0 + LIMIT_S * 1000;
    const answers: Answer[] = [];
    await Promise.all(f.nodes.map((n) => flood([n, n, n], f.secret.capped, 8, until, answers, {}, 200)));
    const minutes: number[] = [];
    for (const a of answers) if (a.status === 200) minutes[Math.floor((a.startedAt - t0) / 60_000)] = (minutes[Math.floor((a.startedAt - t0) / 60_000)] ?? 0) + a.tokens;
    const refused = answers.filter((a) => a.status === 429).length;
    return { limit_tpm: limit, tokens_per_minute: minutes.map((m) => m ?? 0), ratio: minutes.map((m) => +((m ?? 0) / limit).toFixed(3)), admitted: answers.length - refused, refused_429: refused, loadavg_at_end: loadavg() };
  } finally {
    await f.stop();
  }
}

/** CPU per request of key check + scope + limiter admission on one process (µs), keys on vs off. */
async function admissionRun() {
  const N = 50_000;
  const table = new KeyTable();
  const secret = 'vk-bench-secret';
  table.add({ name: 'k', sha256: sha(secret), role: 'user', models: ['qwen*', 'fair'], priority: 'interactive', weight: 1, limits: { tpm: 1e12, rpm: 1e9 } }, 'n1');
  const on = new Keyring(table, []);
  const off = new Keyring(new KeyTable(), []);
  const limiter = new Limiter({ self: 'n1', now: Date.now, alive: () => ['n1'], send: async () => undefined });
  const headers = { authorization: `Bearer ${secret}` };
  const measure = async (fn: () => Promise<void> | void) => {
    const c0 = process.cpuUsage();
    for (let i = 0; i < N; i++) await fn();
    const c = process.cpuUsage(c0);
    return +((c.user + c.system) / N).toFixed(2);
  };
  const offUs = await measure(() => {
    if (off.enabled) throw new Error('keys on');
  });
  const onUs = await measure(async () => {
    const c = on.caller(headers, false)!;
    if (!allowsModel(c, 'fair')) throw new Error('scope');
    const a = await limiter.admit(c.name, c.limits, 300);
    if (a.ok) a.ticket.release();
  });
  return { calls: N, cpu_us_per_request_keys_off: offUs, cpu_us_per_request_keys_on: onUs, added_ms: +((onUs - offUs) / 1000).toFixed(4) };
}

export async function benchFairness(): Promise<Record<string, unknown>> {
  const doc: Record<string, unknown> = { ...machineInfo(), settings: { seconds: S, limit_seconds: LIMIT_S, sessions_per_key: SESSIONS, sim: SIM, slots: 12, interactive_reserve: RESERVE ?? "default (1)" } };
  if (ONLY.has('admission')) doc.admission = await admissionRun();
  if (ONLY.has('sessions')) doc.sessions = await sessionsRun();
  if (ONLY.has('shares')) doc.shares = await sharesRun();
  if (ONLY.has('limits')) doc.limits = await limitsRun();
  return doc;
}

export function printFairness(doc: Record<string, unknown>): void {
  console.log(JSON.stringify(doc, null, 2));
}
