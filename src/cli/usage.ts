/**
 * `viiwork usage [--since 24h] [--key NAME] [--by-hour] [--json]`: usage per
 * key, model and host across the mesh (GET /v1/usage), as a table or JSON.
 * A user key sees its own usage; an admin key every key's.
 */
import type { Command } from 'commander';
import { call, DEFAULT_NODE_URL, formatTable, out, run } from './node-client.ts';

type Row = { key: string; model: string; host: string; hour?: number; requests: number; errors: number; limited: number; prompt_cached: number; prompt_uncached: number; completion: number };
type Doc = { since: number; rows: Row[]; missing: string[] };

/** The usage document as a table, with a totals line; the members that did not answer are named. */
export function usageTable(doc: Doc): string {
  if (!doc.rows.length) return `no usage since ${new Date(doc.since).toISOString()}\n`;
  const byHour = doc.rows.some((r) => r.hour !== undefined);
  const head = [...(byHour ? ['HOUR'] : []), 'KEY', 'MODEL', 'HOST', 'REQUESTS', 'ERRORS', 'LIMITED', 'PROMPT', 'CACHED', 'COMPLETION'];
  const line = (r: Row) => [
    ...(byHour ? [new Date(r.hour ?? 0).toISOString().slice(0, 13) + 'h'] : []),
    r.key,
    r.model,
    r.host,
    String(r.requests),
    String(r.errors),
    String(r.limited),
    String(r.prompt_cached + r.prompt_uncached),
    String(r.prompt_cached),
    String(r.completion),
  ];
  const sum = (f: keyof Row) => doc.rows.reduce((n, r) => n + (r[f] as number), 0);
  const total = [...(byHour ? [''] : []), 'total', '', '', String(sum('requests')), String(sum('errors')), String(sum('limited')), String(sum('prompt_cached') + sum('prompt_uncached')), String(sum('prompt_cached')), String(sum('completion'))];
  const missing = doc.missing.length ? `not answering (their usage is missing): ${doc.missing.join(', ')}\n` : '';
  return formatTable([head, ...doc.rows.map(line), total]) + missing;
}

export function registerUsageCommand(program: Command): void {
  program
    .command('usage')
    .description('usage per key, model and host across the mesh (VIIWORK_API_KEY: yours, or every key’s with an admin key)')
    .option('--since <when>', 'a span back from now (30m, 24h, 7d), a date, or ms since the epoch', '24h')
    .option('--key <name>', 'one key only')
    .option('--by-hour', 'one row per hour')
    .option('--json', 'print the document as JSON')
    .option('--url <url>', 'a node of the mesh', DEFAULT_NODE_URL)
    .action((o: { since: string; key?: string; byHour?: boolean; json?: boolean; url: string }) =>
      run(async () => {
        const q = new URLSearchParams({ since: o.since, ...(o.key ? { key: o.key } : {}), ...(o.byHour ? { by: 'hour' } : {}) });
        const doc = await call<Doc>(o.url, 'GET', `v1/usage?${q}`);
        out(o.json ? `${JSON.stringify(doc, null, 2)}\n` : usageTable(doc));
      })(),
    );
}
