/**
 * `viiwork demo`: a local mesh of three nodes with simulated engines on
 * 127.0.0.1–3 (loopback only), a burst of requests through each entry node,
 * and a table of where each ran and why. Then it keeps running so the
 * dashboards can be watched, until Ctrl-C (or exits with --once).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { request } from 'undici';
import { validateConfig } from '../config/load.ts';
import { createLog } from '../log.ts';
import { ViiworkNode } from '../node/node.ts';
import { formatTable, out } from './node-client.ts';

const SPEED_TABLE = [
  { name: 'demo-a', sim: { ttft_ms: 40, prefill_ms_per_1k: 20, tokens_per_s: 200, output_tokens: 8 } },
  { name: 'demo-b', sim: { ttft_ms: 160, prefill_ms_per_1k: 80, tokens_per_s: 50, output_tokens: 8 } },
  { name: 'demo-c', sim: { ttft_ms: 45, prefill_ms_per_1k: 25, tokens_per_s: 180, output_tokens: 8 } },
];

export async function demo(opts: { port: string; requests: string; net: string; once?: boolean; quiet?: boolean }): Promise<void> {
  const port = Number(opts.port);
  const SPEEDS = SPEED_TABLE.map((s, i) => ({ ...s, ip: `${opts.net}.${i + 1}` }));
  const perEntry = Number(opts.requests);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'viiwork-demo-'));
  const nodes: ViiworkNode[] = [];
  const sink = opts.quiet ? fs.createWriteStream('/dev/null') : undefined;
  const stopAll = async () => {
    await Promise.all(nodes.map((n) => n.stop()));
    fs.rmSync(dir, { recursive: true, force: true });
  };
  try {
    for (const [i, s] of SPEEDS.entries()) {
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
      for (let k = 0; k < 6; k++) await chat(nodes[0].apiUrl, `?host=${n.name}`, [{ role: 'user', content: `warm-up ${n.name}-${k} ${'x'.repeat(k % 2 ? 4000 : 100)}` }]);
    }
    await waitForScores(nodes);
    // Through each entry node in turn: the next turn of one conversation, then cold single questions.
    const rows: string[][] = [];
    const runs: DemoRun[] = [];
    const conversation: { role: string; content: string }[] = [{ role: 'system', content: `You are the demo agent. ${'Keep answers short. '.repeat(200)}` }];
    let turn = 0;
    for (const entry of nodes) {
      for (let k = 0; k < perEntry; k++) {
        let r: Awaited<ReturnType<typeof chat>>;
        if (k === 0) {
          conversation.push({ role: 'user', content: `Turn ${++turn} of the demo conversation.` });
          r = await chat(entry.apiUrl, '', conversation, { 'x-session-id': 'demo-session' });
          conversation.push({ role: 'assistant', content: r.text });
        } else r = await chat(entry.apiUrl, '', [{ role: 'user', content: `cold question ${entry.name}-${k}: ${'x'.repeat(400)}` }]);
        runs.push({ entry: entry.name, executor: r.node, route: r.route, conversation: k === 0, cached: r.cached, prompt: r.prompt });
        rows.push([entry.name, r.node, r.route, `${r.ms} ms`, `${r.cached}/${r.prompt}`, k === 0 ? `conversation, turn ${turn}` : 'cold']);
      }
    }
    out('\nwhere each request ran (entry → executor), why, and how much of its prompt the engine had cached:\n');
    out(formatTable([['ENTRY', 'EXECUTOR', 'ROUTE', 'TIME', 'CACHED/PROMPT', 'REQUEST'], ...rows]));
    out(`\n${narrative(runs, SPEED_TABLE[1].name).join('\n')}\n`);
    if (opts.once) return await stopAll();
    out(`\ndashboards: http://${SPEEDS[0].ip}:${port}/ (mesh) and /node; Ctrl-C stops the demo\n`);
    await new Promise<void>((resolve) => {
      process.once('SIGINT', resolve);
      process.once('SIGTERM', resolve);
    });
  } catch (err) {
    await stopAll();
    throw err;
  }
  await stopAll();
}

async function chat(base: string, query: string, messages: { role: string; content: string }[] | number, headers: Record<string, string> = {}) {
  const t0 = performance.now();
  const msgs = typeof messages === 'number' ? [{ role: 'user', content: 'x'.repeat(messages) }] : messages;
  const r = await request(`${base}/v1/chat/completions${query}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: 'demo-chat', messages: msgs }),
  });
  const doc = (await r.body.json()) as { choices?: { message?: { content?: string } }[]; usage?: { prompt_tokens?: number; prompt_tokens_details?: { cached_tokens?: number } } };
  return {
    node: String(r.headers['x-viiwork-node']),
    route: String(r.headers['x-viiwork-route']),
    ms: Math.round(performance.now() - t0),
    text: doc.choices?.[0]?.message?.content ?? '',
    prompt: doc.usage?.prompt_tokens ?? 0,
    cached: doc.usage?.prompt_tokens_details?.cached_tokens ?? 0,
  };
}

export interface DemoRun {
  entry: string;
  executor: string;
  route: string;
  conversation: boolean;
  cached: number;
  prompt: number;
}

/** The closing text, told from what happened in the run (not what should have). */
export function narrative(runs: readonly DemoRun[], slow: string): string[] {
  const lines: string[] = [];
  const conv = runs.filter((r) => r.conversation);
  const homes = [...new Set(conv.map((r) => r.executor))];
  if (conv.length > 0) {
    const later = conv.slice(1);
    const warm = later.filter((r) => r.prompt > 0 && r.cached >= r.prompt / 2).length;
    const entries = [...new Set(conv.map((r) => r.entry))].join(', ');
    lines.push(
      homes.length === 1
        ? `the conversation's ${conv.length} turns entered through ${entries} and all ran on ${homes[0]}; ${warm} of its ${later.length} later turns found most of their prompt in that engine's cache.`
        : `the conversation's ${conv.length} turns entered through ${entries} and ran on ${conv.map((r) => r.executor).join(' → ')}; ${warm} of its ${later.length} later turns found most of their prompt cached where they ran.`,
    );
  }
  const cold = runs.filter((r) => !r.conversation);
  if (cold.length > 0) {
    const by = new Map<string, number>();
    for (const r of cold) by.set(r.executor, (by.get(r.executor) ?? 0) + 1);
    const spread = [...by].sort((a, b) => b[1] - a[1]).map(([h, n]) => `${h} ×${n}`).join(', ');
    const routes = new Map<string, number>();
    for (const r of cold) routes.set(r.route, (routes.get(r.route) ?? 0) + 1);
    lines.push(`the ${cold.length} cold questions ran on ${spread} (routes: ${[...routes].map(([k, n]) => `${k} ×${n}`).join(', ')}).`);
    const onSlow = cold.filter((r) => r.executor === slow).length;
    const enteredSlow = cold.filter((r) => r.entry === slow);
    lines.push(
      `${slow}'s engine is 4× slower: ${enteredSlow.filter((r) => r.executor !== slow).length} of the ${enteredSlow.length} cold questions entering it ran elsewhere, and it ran ${onSlow} of ${cold.length} in all.`,
    );
  }
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
