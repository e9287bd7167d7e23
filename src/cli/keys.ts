/**
 * `viiwork keys add|ls|rm|set`: the operator's side of /v1/keys (SPEC
 * section 12). Each talks to a node (this machine's by default; an admin key
 * in VIIWORK_API_KEY once the mesh has keys) and prints lines and tables.
 * `add` prints the new secret once: it is kept nowhere. And `viiwork usage`,
 * what each key used.
 */
import type { Command } from 'commander';
import { LIMIT_KINDS } from '../config/key-spec.ts';
import { call, DEFAULT_NODE_URL, formatTable, out, run } from './node-client.ts';

type KeyItem = { name: string; role: string; models: string[]; priority: string; weight: number; limits: Record<string, number>; version: number; writer: string };
type Written = Partial<KeyItem> & { name: string; key?: string; deleted?: boolean; version: number; reached: number; members: number };

const collect = (value: string, previous: string[]) => [...previous, value];
const seg = (name: string) => encodeURIComponent(name);
const reachedText = (r: Written) => `version ${r.version}, reached ${r.reached} of ${r.members} member${r.members === 1 ? '' : 's'}`;

/** `--limit tpm=60000` (repeatable); `none` removes a limit (keys set). Throws on anything else. */
export function parseLimits(items: readonly string[]): Record<string, number | null> {
  const out: Record<string, number | null> = {};
  for (const item of items) {
    const m = /^([a-z_]+)=(none|\d+)$/.exec(item.trim());
    if (!m || !(LIMIT_KINDS as readonly string[]).includes(m[1])) throw new Error(`--limit ${item}: write KIND=N with KIND one of ${LIMIT_KINDS.join(', ')} (or KIND=none to remove it)`);
    out[m[1]] = m[2] === 'none' ? null : Number(m[2]);
  }
  return out;
}

type FieldOpts = { role?: string; models?: string[]; priority?: string; weight?: string; limit: string[] };

/** The fields a command line asks for, as the JSON body of POST or PATCH. */
export function keyFields(o: FieldOpts): Record<string, unknown> {
  const models = o.models?.flatMap((m) => m.split(',')).map((m) => m.trim()).filter(Boolean);
  return {
    ...(o.role !== undefined ? { role: o.role } : {}),
    ...(models?.length ? { models } : {}),
    ...(o.priority !== undefined ? { priority: o.priority } : {}),
    ...(o.weight !== undefined ? { weight: Number(o.weight) } : {}),
    ...(o.limit.length ? { limits: parseLimits(o.limit) } : {}),
  };
}

const limitsText = (l: Record<string, number> | undefined) => (l && Object.keys(l).length ? Object.entries(l).map(([k, v]) => `${k}=${v}`).join(' ') : '-');

function fieldOptions(c: Command): Command {
  return c
    .option('--role <role>', 'user or admin')
    .option('--models <globs>', 'models and aliases it may use, comma-separated globs (repeatable)', collect, undefined as unknown as string[])
    .option('--priority <band>', 'the highest priority it may ask for: interactive or batch')
    .option('--weight <n>', 'its share of a full fleet against other keys')
    .option('--limit <kind=n>', `a limit (${LIMIT_KINDS.join(', ')}), repeatable`, collect, [] as string[])
    .option('--url <url>', 'a node of the mesh', DEFAULT_NODE_URL);
}

export function registerKeysCommand(program: Command): void {
  const keys = program.command('keys').description('client keys of the mesh: roles, model scopes, priority, limits (an admin key in VIIWORK_API_KEY)');

  fieldOptions(keys.command('add <name>').description('make a new key, print it once, and add it to the mesh (the first key must be --role admin)')).action((name: string, o: FieldOpts & { url: string }) =>
    run(async () => {
      const r = await call<Written>(o.url, 'POST', 'v1/keys', { name, ...keyFields(o) });
      out(`key ${r.name} (${r.role}) added: ${reachedText(r)}\n${r.key}\n`);
      process.stderr.write('keep the key above now: it is shown only this once\n');
    })(),
  );

  fieldOptions(keys.command('set <name>').description('change fields of a key (--limit KIND=none removes a limit)')).action((name: string, o: FieldOpts & { url: string }) =>
    run(async () => {
      const r = await call<Written>(o.url, 'PATCH', `v1/keys/${seg(name)}`, keyFields(o));
      out(`key ${r.name}: role ${r.role}, models ${r.models?.join(',')}, ${r.priority}, weight ${r.weight}, limits ${limitsText(r.limits)}: ${reachedText(r)}\n`);
    })(),
  );

  keys
    .command('rm <name>')
    .description('revoke a key on every node')
    .option('--url <url>', 'a node of the mesh', DEFAULT_NODE_URL)
    .action((name: string, o: { url: string }) =>
      run(async () => {
        const r = await call<Written>(o.url, 'DELETE', `v1/keys/${seg(name)}`);
        out(`key ${r.name} revoked: ${reachedText(r)}\n`);
      })(),
    );

  keys
    .command('ls')
    .description('list the keys of the mesh (never their secrets)')
    .option('--json', 'print the list as JSON')
    .option('--url <url>', 'a node of the mesh', DEFAULT_NODE_URL)
    .action((o: { url: string; json?: boolean }) =>
      run(async () => {
        const doc = await call<{ version: number; keys: KeyItem[] }>(o.url, 'GET', 'v1/keys');
        if (o.json) return void out(`${JSON.stringify(doc, null, 2)}\n`);
        if (!doc.keys.length) return void out(`no keys (table version ${doc.version})\n`);
        const rows = doc.keys.map((k) => [k.name, k.role, k.models.join(','), k.priority, String(k.weight), limitsText(k.limits), String(k.version)]);
        out(formatTable([['NAME', 'ROLE', 'MODELS', 'PRIORITY', 'WEIGHT', 'LIMITS', 'VERSION'], ...rows]));
      })(),
    );
}

/*
 * `viiwork usage [--since 24h] [--key NAME] [--by-hour] [--json]`: usage per
 * key, model and host across the mesh (GET /v1/usage), as a table or JSON.
 * A user key sees its own usage; an admin key every key's.
 */

type UsageRow = { key: string; model: string; host: string; hour?: number; requests: number; errors: number; limited: number; prompt_cached: number; prompt_uncached: number; completion: number };
type UsageDoc = { since: number; rows: UsageRow[]; missing: string[] };

/** The usage document as a table, with a totals line; the members that did not answer are named. */
export function usageTable(doc: UsageDoc): string {
  if (!doc.rows.length) return `no usage since ${new Date(doc.since).toISOString()}\n`;
  const byHour = doc.rows.some((r) => r.hour !== undefined);
  const head = [...(byHour ? ['HOUR'] : []), 'KEY', 'MODEL', 'HOST', 'REQUESTS', 'ERRORS', 'LIMITED', 'PROMPT', 'CACHED', 'COMPLETION'];
  const line = (r: UsageRow) => [
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
  const sum = (f: keyof UsageRow) => doc.rows.reduce((n, r) => n + (r[f] as number), 0);
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
        const doc = await call<UsageDoc>(o.url, 'GET', `v1/usage?${q}`);
        out(o.json ? `${JSON.stringify(doc, null, 2)}\n` : usageTable(doc));
      })(),
    );
}
