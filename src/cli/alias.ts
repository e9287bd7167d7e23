/**
 * `viiwork alias set|ls|rm|history|revert`: the operator's side of the alias
 * endpoints (/v1/aliases). Each talks to the node on this machine (alias
 * writes are accepted only from there) and prints lines and tables; on a
 * refusal it prints the node's message and exits 1.
 */
import type { Command } from 'commander';
import { call, DEFAULT_NODE_URL, formatTable, out, run } from './node-client.ts';

type AliasItem = { alias: string; target: string; fallbacks: string[]; version: number; writer: string; at: number };
type HistoryItem = { alias: string; action: 'set' | 'rm'; target: string | null; fallbacks: string[]; version: number; writer: string; at: number };
type WriteResult = { alias: string; target?: string; fallbacks?: string[]; deleted?: boolean; version: number; reached: number; members: number };

const when = (at: number) => (at > 0 ? new Date(at).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z') : '-');
const fallbacksText = (f: string[] | undefined) => (f && f.length ? ` (fallbacks: ${f.join(', ')})` : '');
const reachedText = (r: WriteResult) => `version ${r.version}, reached ${r.reached} of ${r.members} member${r.members === 1 ? '' : 's'}`;
const seg = (name: string) => encodeURIComponent(name);

const collect = (value: string, previous: string[]) => [...previous, value];

/** Add `viiwork alias ...` to the program. */
export function registerAliasCommand(program: Command): void {
  const alias = program.command('alias').description('mesh-wide model aliases, with fallbacks (run on a node’s own machine)');
  const urlOption = ['--url <url>', 'this machine’s node', DEFAULT_NODE_URL] as const;

  alias
    .command('set <name> <target>')
    .description('point NAME at model TARGET, then each --fallback in order')
    .option('--fallback <model>', 'a model to use when the ones before it are not served (repeatable)', collect, [] as string[])
    .option(...urlOption)
    .action((name: string, target: string, opts: { fallback: string[]; url: string }) =>
      run(async () => {
        const r = await call<WriteResult>(opts.url, 'PUT', `v1/aliases/${seg(name)}`, { target, fallbacks: opts.fallback });
        out(`alias ${r.alias} -> ${r.target}${fallbacksText(r.fallbacks)}: ${reachedText(r)}\n`);
      })(),
    );

  alias
    .command('ls')
    .description('list the aliases of the mesh')
    .option(...urlOption)
    .action((opts: { url: string }) =>
      run(async () => {
        const doc = await call<{ version: number; data: AliasItem[] }>(opts.url, 'GET', 'v1/aliases');
        if (!doc.data.length) {
          out(`no aliases (table version ${doc.version})\n`);
          return;
        }
        const rows = doc.data.map((a) => [a.alias, a.target, a.fallbacks.join(', ') || '-', String(a.version), a.writer, when(a.at)]);
        out(formatTable([['ALIAS', 'TARGET', 'FALLBACKS', 'VERSION', 'WRITER', 'CHANGED'], ...rows]));
      })(),
    );

  alias
    .command('rm <name>')
    .description('remove alias NAME from the mesh')
    .option(...urlOption)
    .action((name: string, opts: { url: string }) =>
      run(async () => {
        const r = await call<WriteResult>(opts.url, 'DELETE', `v1/aliases/${seg(name)}`);
        out(`alias ${r.alias} removed: ${reachedText(r)}\n`);
      })(),
    );

  alias
    .command('history [name]')
    .description('changes this node has seen, oldest first (of NAME only when given)')
    .option(...urlOption)
    .action((name: string | undefined, opts: { url: string }) =>
      run(async () => {
        const query = name === undefined ? '' : `?alias=${encodeURIComponent(name)}`;
        const doc = await call<{ data: HistoryItem[] }>(opts.url, 'GET', `v1/aliases/history${query}`);
        if (!doc.data.length) {
          out(name === undefined ? 'no alias changes\n' : `no changes of alias ${name}\n`);
          return;
        }
        const rows = doc.data.map((h) => [
          String(h.version),
          when(h.at),
          h.writer,
          h.alias,
          h.action === 'rm' ? 'removed' : `-> ${h.target}${fallbacksText(h.fallbacks)}`,
        ]);
        out(formatTable([['VERSION', 'WHEN', 'WRITER', 'ALIAS', 'CHANGE'], ...rows]));
      })(),
    );

  alias
    .command('revert <name>')
    .description('restore the value NAME had before its last change')
    .option(...urlOption)
    .action((name: string, opts: { url: string }) =>
      run(async () => {
        const r = await call<WriteResult>(opts.url, 'POST', `v1/aliases/${seg(name)}/revert`);
        out(`alias ${r.alias} reverted to ${r.target}${fallbacksText(r.fallbacks)}: ${reachedText(r)}\n`);
      })(),
    );
}
