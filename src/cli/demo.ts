/**
 * `viiwork demo`: a local mesh of three nodes with simulated engines on
 * 127.0.0.1–3 (loopback only); a conversation whose turns enter through
 * every node in turn, and cold requests through each entry node; tables of
 * where each ran, why and how much of its prompt was cached there, and a
 * closing text derived from what really happened. Then it keeps running so the
 * dashboards can be watched, until Ctrl-C (or exits with --once).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { request } from 'undici';
import { validateConfig } from '../config/load.ts';
import { createLog } from '../log.ts';
import { ViiworkNode } from '../node/node.ts';
import { endChildren } from './children.ts';
import { formatTable, out } from './node-client.ts';

/** The node whose engine is 4× slower than the others'. */
const SLOW_NODE = 'demo-b';
const CONVERSATION_TURNS = 4;

const SPEED_TABLE = [
  { name: 'demo-a', sim: { ttft_ms: 40, prefill_ms_per_1k: 20, tokens_per_s: 200, output_tokens: 8 } },
  { name: 'demo-b', sim: { ttft_ms: 160, prefill_ms_per_1k: 80, tokens_per_s: 50, output_tokens: 8 } },
  { name: 'demo-c', sim: { ttft_ms: 45, prefill_ms_per_1k: 25, tokens_per_s: 180, output_tokens: 8 } },
];

/** How long the nodes get to stop gracefully after Ctrl-C (leaving the mesh waits up to 2 s otherwise). */
const STOP_GRACE_MS = 300;
/** How long children (tsx's esbuild services) get after the signal is passed on to them, before SIGKILL. */
const CHILD_GRACE_MS = 150;
/** How long SIGKILLed children get to be reaped. */
const CHILD_REAP_MS = 300;

export async function demo(opts: { port: string; requests: string; net: string; once?: boolean; quiet?: boolean }): Promise<void> {
  const port = Number(opts.port);
  const SPEEDS = SPEED_TABLE.map((s, i) => ({ ...s, ip: `${opts.net}.${i + 1}` }));
  const perEntry = Number(opts.requests);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'viiwork-demo-'));
  const nodes: ViiworkNode[] = [];
  const sink = opts.quiet ? fs.createWriteStream('/dev/null') : undefined;
  // Ctrl-C (or SIGTERM) ends the demo from here on, during the run too, not only once it waits for it:
  // a signal's default action would end the process before its children are reaped.
  let signalled: NodeJS.Signals | undefined;
  let onSignal: (sig: NodeJS.Signals) => void = () => {};
  const interrupted = new Promise<void>((resolve) => {
    onSignal = (sig) => {
      signalled ??= sig;
      resolve();
    };
  });
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  const run = async () => {
    for (const [i, s] of SPEEDS.entries()) {
      if (signalled) return;
      const config = validateConfig({
        node: { name: s.name, state_dir: path.join(dir, s.name) },
        api: { host: s.ip, port },
        mesh: { open: true, network: 'lan', mdns: false, advertise: s.ip, port: 7946, seeds: i > 0 ? [`${SPEEDS[0].ip}:7946`] : [], rejoin_interval: '5s' },
        models: [
          { name: 'demo-chat', engine: 'sim', parallel: 2, workloads: ['chat', 'completion'], sim: s.sim },
          ...(i === 2 ? [{ name: 'demo-embed', engine: 'sim', parallel: 4, workloads: ['embeddings'], sim: { ...s.sim, output_tokens: 1 } }] : []),
        ],
      });
      const node = new ViiworkNode(config, { log: createLog(s.name, sink ? { destination: sink } : {}) });
      nodes.push(node);
      await node.start();
    }
    out(`\nthree nodes up: ${SPEEDS.map((s) => `http://${s.ip}:${port}`).join('  ')}\n`);
    await waitForMesh(nodes);
    // Teach every node its speed: a few requests pinned to each host, short and long prompts.
    for (const n of nodes) {
      for (let k = 0; k < 6; k++) await chat(nodes[0].apiUrl, `?host=${n.name}`, [{ role: 'user', content: `speed check ${k}: ${'x'.repeat(k % 2 ? 4000 : 100)}` }]);
    }
    await waitForScores(nodes);
    // A conversation with a long system prompt, each turn entering another node, no session header, a
    // capacity poll apart: where its turns run shows whether routing keeps its prompt cache warm.
    const conversation: Turn[] = [];
    const messages: { role: string; content: string }[] = [{ role: 'system', content: `You are the demo assistant. ${'Keep answers short. '.repeat(300)}` }];
    let lastEnded = 0;
    for (let k = 0; k < CONVERSATION_TURNS; k++) {
      const entry = nodes[k % nodes.length];
      // An agent thinks between turns: the next entry node has polled every other node (their cache digests
      // included) since the last turn ended, at most one capacity_poll later.
      if (k > 0) await waitUntil(async () => nodes.every((o) => o === entry || (entry.poller?.get(o.name)?.polledAt ?? 0) > lastEnded), 10_000, `${entry.name} to hear from every node`);
      messages.push({ role: 'user', content: `turn ${k + 1}: ${'tell me more. '.repeat(20)}` });
      const r = await chat(entry.apiUrl, '', messages);
      lastEnded = Date.now();
      messages.push({ role: 'assistant', content: r.text || 'ok' });
      conversation.push({ entry: entry.name, ...r });
    }
    // Cold work: requests with prompts nobody has seen, from every entry node.
    const cold: Turn[] = [];
    for (const [i, entry] of nodes.entries()) {
      for (let k = 0; k < perEntry; k++) {
        const r = await chat(entry.apiUrl, '', [{ role: 'user', content: `${i * perEntry + k}: a cold request, ${'x'.repeat(400)}` }]);
        cold.push({ entry: entry.name, ...r });
      }
    }
    out('\na conversation, each turn entering another node:\n');
    out(formatTable([['TURN', 'ENTRY', 'EXECUTOR', 'ROUTE', 'CACHED', 'TIME'], ...conversation.map((t, k) => [String(k + 1), t.entry, t.node, t.route, cachedCell(t), `${t.ms} ms`])]));
    out('\ncold requests (prompts nobody has seen), entry → executor:\n');
    out(formatTable([['ENTRY', 'EXECUTOR', 'ROUTE', 'CACHED', 'TIME'], ...cold.map((t) => [t.entry, t.node, t.route, cachedCell(t), `${t.ms} ms`])]));
    out(`\n${narrate(conversation, cold, SLOW_NODE).join('\n')}\n`);
    if (opts.once) return;
    out(`\ndashboards: http://${SPEEDS[0].ip}:${port}/ (mesh) and /node; Ctrl-C stops the demo\n`);
    await interrupted;
  };
  let failure: { err: unknown } | undefined;
  const running = run().catch((err) => {
    // A request or wait cut short by the interrupt is no failure.
    if (!signalled) failure = { err };
  });
  await Promise.race([running, interrupted]);
  // Children first, while every thread that started one still runs: tsx's esbuild services (one in this thread,
  // one in each node's gossip worker) get the signal, then SIGKILL, and are reaped by the thread that spawned them.
  // Once a gossip worker has ended (a node's stop ends it) nobody reaps its child, and a process that exits first
  // leaves its children to pid 1, in the demo's process group, for as long as that takes.
  await endChildren(signalled ?? 'SIGTERM', CHILD_GRACE_MS, CHILD_REAP_MS);
  // The nodes get STOP_GRACE_MS to stop (leaving the mesh, closing servers); past it the process exits regardless.
  const stopped = Promise.all(nodes.map((n) => n.stop().catch(() => {})));
  await Promise.race([stopped, new Promise((r) => setTimeout(r, STOP_GRACE_MS))]);
  fs.rmSync(dir, { recursive: true, force: true });
  // Any child started meanwhile.
  await endChildren('SIGKILL', 0, CHILD_REAP_MS);
  if (failure) throw failure.err;
  // A node still leaving the mesh would hold the process up to 2 s more: exit now, once stdout is written.
  await new Promise<void>((resolve) => process.stdout.write('', () => resolve()));
  process.exit(0);
}

/** One request of the demo and what its answer said: where it ran, why, and how much of its prompt was cached there. */
interface Turn {
  entry: string;
  node: string;
  route: string;
  ms: number;
  text: string;
  promptTokens?: number;
  cachedTokens?: number;
}

async function chat(base: string, query: string, messages: { role: string; content: string }[], headers: Record<string, string> = {}): Promise<Omit<Turn, 'entry'>> {
  const t0 = performance.now();
  const r = await request(`${base}/v1/chat/completions${query}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: 'demo-chat', stream: true, stream_options: { include_usage: true }, messages }),
  });
  const sse = await r.body.text();
  let text = '';
  let usage: { prompt_tokens?: number; prompt_tokens_details?: { cached_tokens?: number } } | undefined;
  for (const line of sse.split('\n')) {
    if (!line.startsWith('data: {')) continue;
    const ev = JSON.parse(line.slice(6)) as { choices?: { delta?: { content?: string } }[]; usage?: typeof usage };
    text += ev.choices?.[0]?.delta?.content ?? '';
    if (ev.usage) usage = ev.usage;
  }
  return {
    node: String(r.headers['x-viiwork-node']),
    route: String(r.headers['x-viiwork-route']),
    ms: Math.round(performance.now() - t0),
    text: text.slice(0, 200),
    promptTokens: usage?.prompt_tokens,
    cachedTokens: usage?.prompt_tokens_details?.cached_tokens,
  };
}

const cachedCell = (t: Turn) => (t.promptTokens === undefined ? '-' : `${t.cachedTokens ?? 0}/${t.promptTokens}`);

const ROUTE_MEANING: Record<string, string> = {
  local: 'the entry node itself was among the fastest',
  scored: 'the host predicted to answer first',
  session: "the session key's host",
  prefix: 'the host ranked first for the prompt’s start (prefix affinity)',
  pinned: 'pinned with ?host=',
  preferred: 'preferred with ?prefer=',
  explore: 'an unscored host trying for a score',
  'most-free': 'the host with the most free slots',
  queued: 'waited in the queue first',
};

/** What the run shows, in words, derived from where the requests really ran. */
export function narrate(conversation: readonly Turn[], cold: readonly Turn[], slowNode: string): string[] {
  const lines: string[] = [];
  const homes = [...new Set(conversation.map((t) => t.node))];
  const later = conversation.slice(1);
  const cached = later.reduce((n, t) => n + (t.cachedTokens ?? 0), 0);
  const prompt = later.reduce((n, t) => n + (t.promptTokens ?? 0), 0);
  const share = prompt ? ` (turns 2–${conversation.length} found ${Math.round((100 * cached) / prompt)}% of their prompt tokens in its cache)` : '';
  if (homes.length === 1) lines.push(`The conversation entered through ${[...new Set(conversation.map((t) => t.entry))].join(', ')} and ran on ${homes[0]} every turn: its prompt cache stayed warm${share}.`);
  else {
    const moves = conversation.flatMap((t, k) => (k > 0 && t.node !== conversation[k - 1].node ? [`turn ${k + 1} → ${t.node} (${t.route})`] : []));
    lines.push(`The conversation ran on ${homes.join(', ')}; it moved ${moves.length === 1 ? 'once' : `${moves.length} times`}: ${moves.join(', ')}${share}.`);
  }
  const where = new Map<string, number>();
  for (const t of cold) where.set(t.node, (where.get(t.node) ?? 0) + 1);
  const spread = [...where.entries()].sort((a, b) => b[1] - a[1]).map(([n, c]) => `${n} ×${c}`).join(', ');
  const slow = where.get(slowNode) ?? 0;
  lines.push(`Cold requests ran on ${spread}${slow === 0 ? `, never on ${slowNode}, whose engine is 4× slower` : ''}.`);
  const routes = new Map<string, number>();
  for (const t of [...conversation, ...cold]) routes.set(t.route, (routes.get(t.route) ?? 0) + 1);
  for (const [route, n] of [...routes.entries()].sort((a, b) => b[1] - a[1])) lines.push(`  route "${route}" ×${n}: ${ROUTE_MEANING[route] ?? route}`);
  return lines;
}

async function waitUntil(pred: () => Promise<boolean>, ms: number, what: string): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await pred().catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`demo: timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function waitForMesh(nodes: ViiworkNode[]): Promise<void> {
  return waitUntil(async () => nodes.every((n) => n.members.peers().filter((m) => m.state === 'alive').length === nodes.length - 1 && nodes.every((o) => o === n || n.poller?.get(o.name))), 20_000, 'the mesh to form');
}

function waitForScores(nodes: ViiworkNode[]): Promise<void> {
  return waitUntil(
    async () =>
      nodes.every((n) =>
        nodes.every((o) => {
          if (o === n) return true;
          const m = n.poller?.get(o.name)?.report.models.find((x) => x.name === 'demo-chat');
          return m?.ttft_overhead_ms !== undefined && m.prefill_ms_per_1k !== undefined;
        }),
      ),
    20_000,
    'scores to spread',
  );
}
