/**
 * `viiwork top`: a live terminal view of the mesh as one node sees it, like
 * top(1): hosts with their slots, queues and the last 15 minutes as
 * sparklines, and the most recent requests; redrawn in place every
 * --interval until q or Ctrl-C.
 */
import type { DecisionRecord } from '../dispatch/decisions.ts';
import type { HistoryDoc } from '../history/store.ts';
import { call, formatTable, printable } from './node-client.ts';
import { CLI_SERIES, historyRows } from './sparkline.ts';

interface FleetHost {
  node: string;
  slots: number;
  busy: number;
  queued?: number;
  fresh: boolean;
}

interface Fleet {
  node: string;
  models: { name: string; hosts: FleetHost[] }[];
}

const RECENT = 12;

/** One screen of top from the node's documents: pure, so a test can read it without a terminal. */
export function topScreen(url: string, fleet: Fleet, history: HistoryDoc, decisions: DecisionRecord[], now: number): string {
  const hosts = new Map<string, { slots: number; busy: number; queued: number; fresh: boolean; models: string[] }>();
  for (const m of fleet.models)
    for (const h of m.hosts) {
      const x = hosts.get(h.node) ?? { slots: 0, busy: 0, queued: 0, fresh: true, models: [] };
      x.slots += h.slots;
      x.busy += h.busy;
      x.queued += h.queued ?? 0;
      x.fresh &&= h.fresh;
      x.models.push(m.name);
      hosts.set(h.node, x);
    }
  const spark = new Map(historyRows(history, now).map((r) => [r[0], r]));
  const rows = [...hosts.keys()].sort().map((name) => {
    const h = hosts.get(name)!;
    const s = spark.get(name) ?? [name, '', '-', '', '-', '', '-'];
    return [name, `${h.busy}/${h.slots}`, String(h.queued), h.fresh ? 'fresh' : 'stale', `${s[1]} ${s[2]}`, `${s[3]} ${s[4]}`, h.models.join(',')];
  });
  const recent = decisions.slice(-RECENT).reverse().map((d) => [new Date(d.at).toISOString().slice(11, 19), d.entry, d.executor ?? '-', d.model, d.route, d.ttft_ms === null ? '-' : `${d.ttft_ms} ms`, d.outcome]);
  return [
    printable(`viiwork top — ${fleet.node} at ${url} — ${new Date(now).toISOString().slice(11, 19)} UTC — q to quit`, false),
    '',
    formatTable([['HOST', 'BUSY', 'QUEUED', 'REPORT', 'REQ/S (15 MIN)', 'TTFT P95 (15 MIN)', 'MODELS'], ...rows]),
    'RECENT REQUESTS (this node)',
    recent.length ? formatTable([['TIME', 'ENTRY', 'EXECUTOR', 'MODEL', 'ROUTE', 'TTFT', 'OUTCOME'], ...recent]) : 'none yet\n',
  ].join('\n');
}

export async function top(opts: { url: string; interval: string }): Promise<void> {
  const everyMs = Math.max(250, Number.parseFloat(opts.interval) * (opts.interval.endsWith('ms') ? 1 : 1000) || 2000);
  const tty = process.stdout.isTTY;
  let stopped = false;
  const stop = () => {
    stopped = true;
    if (tty) process.stdout.write('\x1b[?25h\n');
    process.exit(0);
  };
  if (process.stdin.isTTY) {
    process.stdin.setRawMode(true);
    process.stdin.on('data', (d) => (d[0] === 0x71 || d[0] === 0x03 ? stop() : undefined));
  }
  process.once('SIGINT', stop);
  if (tty) process.stdout.write('\x1b[?25l\x1b[2J');
  let since = 0;
  let seen: DecisionRecord[] = [];
  while (!stopped) {
    let screen: string;
    try {
      const [fleet, history, feed] = await Promise.all([
        call<Fleet>(opts.url, 'GET', '/v1/fleet/capacity'),
        call<HistoryDoc>(opts.url, 'GET', `/v1/history?series=${CLI_SERIES}&since=-15m`),
        call<{ last: number; data: DecisionRecord[] }>(opts.url, 'GET', `/v1/decisions?since=${since}`),
      ]);
      if (feed.last < since) seen = [];
      since = feed.last;
      seen = [...seen, ...feed.data.filter((d) => !d.lifecycle)].slice(-RECENT);
      screen = topScreen(opts.url, fleet, history, seen, Date.now());
    } catch (err) {
      screen = `${printable(`viiwork top — ${opts.url} — ${(err as Error).message}`, false)}\n`;
    }
    // In place: home, the screen with each line cleared to its end, then clear below.
    process.stdout.write(tty ? `\x1b[H${screen.replace(/\n/g, '\x1b[K\n')}\x1b[J` : `${screen}\n`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
