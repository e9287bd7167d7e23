/** `viiwork demo` forms a local mesh and shows requests entering the slow node running on the fast ones. */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';

const run = promisify(execFile);

describe('viiwork demo', () => {
  it('prints where each request ran: requests avoid the 4× slower node', async () => {
    const { stdout } = await run(process.execPath, [path.resolve('bin/viiwork.js'), 'demo', '--once', '--quiet', '--net', '127.0.25', '--requests', '4'], { timeout: 90_000 });
    const rows = stdout.split('\n').filter((l) => /^demo-[abc]\s+demo-[abc]\s+\w/.test(l)).map((l) => l.split(/\s+/));
    assert.equal(rows.length, 12, stdout);
    // demo-b's engine is 4× slower than the others: nothing runs there unless a session hashes to it.
    for (const [, executor, route] of rows) if (route !== 'session') assert.notEqual(executor, 'demo-b', stdout);
  });
});
