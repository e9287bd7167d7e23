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
      for (let k = 0; k < 6; k++) await chat(nodes[0].apiUrl, `?host=${n.name}`, k % 2 ? 4000 : 100);
    }
    await waitForScores(nodes);
    const rows: string[][] = [];
    for (const entry of nodes) {
      for (let k = 0; k < perEntry; k++) {
        const r = await chat(entry.apiUrl, '', 400, k === 0 ? { 'x-session-id': 'demo-session' } : {});
        rows.push([entry.name, r.node, r.route, `${r.ms} ms`]);
      }
    }
    out('\nwhere each request ran (entry → executor), and why:\n');
    out(formatTable([['ENTRY', 'EXECUTOR', 'ROUTE', 'TIME'], ...rows]));
    out('\ndemo-b’s engine is 4× slower: requests entering it run on demo-a or demo-c (route "scored");\n');
    out('requests entering a fast node stay there (route "local"); a session keeps its host (route "session").\n');
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

async function chat(base: string, query: string, chars: number, headers: Record<string, string> = {}) {
  const t0 = performance.now();
  const r = await request(`${base}/v1/chat/completions${query}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: 'demo-chat', stream: true, messages: [{ role: 'user', content: 'x'.repeat(chars) }] }),
  });
  await r.body.text();
  return { node: String(r.headers['x-viiwork-node']), route: String(r.headers['x-viiwork-route']), ms: Math.round(performance.now() - t0) };
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
