/** `viiwork alias ...` run as a real process against a node:http server hosting the alias routes. */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { AliasTable } from '../../src/aliases/table.ts';
import { serveAliases, type AliasServer } from './serve.ts';

const BIN = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../bin/viiwork.js');

/** Run the CLI without blocking this process (the server under test lives here). */
function viiwork(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { timeout: 30_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

describe('viiwork alias (CLI)', () => {
  const table = new AliasTable({ now: () => Date.UTC(2025, 10, 29, 18, 40) });
  let server: AliasServer;
  before(async () => {
    server = await serveAliases({ table, nodeName: 'gpu1', reached: () => ({ reached: 2, members: 3 }) });
  });
  after(() => server.close());

  it('set prints the alias, its version and how many members reached it', async () => {
    const r = await viiwork('alias', 'set', 'chat', 'qwen2.5-7b-instruct', '--fallback', 'tiny', '--fallback', 'demo-fast', '--url', server.url);
    assert.equal(r.stderr, '');
    assert.equal(r.code, 0);
    assert.equal(r.stdout, 'alias chat -> qwen2.5-7b-instruct (fallbacks: tiny, demo-fast): version 1, reached 2 of 3 members\n');
    assert.deepEqual(table.get('chat')?.fallbacks, ['tiny', 'demo-fast']);
  });

  it('ls prints a table; rm, revert and history work through the node', async () => {
    await viiwork('alias', 'set', 'code', 'coder-7b', '--url', server.url);
    const ls = await viiwork('alias', 'ls', '--url', server.url);
    assert.equal(ls.code, 0);
    assert.equal(
      ls.stdout,
      [
        'ALIAS  TARGET               FALLBACKS        VERSION  WRITER  CHANGED',
        'chat   qwen2.5-7b-instruct  tiny, demo-fast  1        gpu1    2025-11-29 18:40:00Z',
        'code   coder-7b             -                2        gpu1    2025-11-29 18:40:00Z',
        '',
      ].join('\n'),
    );

    const rm = await viiwork('alias', 'rm', 'chat', '--url', server.url);
    assert.deepEqual([rm.code, rm.stdout], [0, 'alias chat removed: version 3, reached 2 of 3 members\n']);
    const rv = await viiwork('alias', 'revert', 'chat', '--url', server.url);
    assert.deepEqual([rv.code, rv.stdout], [0, 'alias chat reverted to qwen2.5-7b-instruct (fallbacks: tiny, demo-fast): version 4, reached 2 of 3 members\n']);

    const h = await viiwork('alias', 'history', 'chat', '--url', server.url);
    assert.equal(h.code, 0);
    assert.equal(
      h.stdout,
      [
        'VERSION  WHEN                  WRITER  ALIAS  CHANGE',
        '1        2025-11-29 18:40:00Z  gpu1    chat   -> qwen2.5-7b-instruct (fallbacks: tiny, demo-fast)',
        '3        2025-11-29 18:40:00Z  gpu1    chat   removed',
        '4        2025-11-29 18:40:00Z  gpu1    chat   -> qwen2.5-7b-instruct (fallbacks: tiny, demo-fast)',
        '',
      ].join('\n'),
    );
  });

  it('exits non-zero with the node’s error message when the node refuses', async () => {
    const r = await viiwork('alias', 'rm', 'nope', '--url', server.url);
    assert.equal(r.code, 1);
    assert.equal(r.stdout, '');
    assert.equal(r.stderr, 'viiwork: no alias named "nope"; GET /v1/aliases lists them\n');
    const bad = await viiwork('alias', 'set', 'has space', 'm', '--url', server.url);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /^viiwork: invalid alias request: alias name "has space" must not contain whitespace/);
  });

  it('exits non-zero with a clear message when no node answers', async () => {
    const r = await viiwork('alias', 'ls', '--url', 'http://127.0.0.1:1');
    assert.equal(r.code, 1);
    assert.match(r.stderr, /^viiwork: cannot reach the node at http:\/\/127\.0\.0\.1:1 \(ECONNREFUSED\)/);
  });
});
