/** `viiwork demo` forms a local mesh and shows what routing did: a conversation kept warm, cold work avoiding the slow node. */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';

const run = promisify(execFile);

describe('viiwork demo', () => {
  it('prints where each request ran and a closing text that says what really happened', async () => {
    const { stdout } = await run(process.execPath, [path.resolve('bin/viiwork.js'), 'demo', '--once', '--quiet', '--net', '127.0.25', '--requests', '4'], { timeout: 90_000 });
    const turns = stdout.split('\n').filter((l) => /^[1-4]\s+demo-[abc]\s+demo-[abc]\s+\S+\s+\d+\/\d+/.test(l)).map((l) => l.split(/\s+/));
    const cold = stdout.split('\n').filter((l) => /^demo-[abc]\s+demo-[abc]\s+\w/.test(l)).map((l) => l.split(/\s+/));
    assert.equal(turns.length, 4, stdout);
    assert.equal(cold.length, 12, stdout);
    // The conversation enters through every node in turn and stays where its prompt is cached.
    assert.deepEqual(new Set(turns.map((t) => t[1])), new Set(['demo-a', 'demo-b', 'demo-c']), stdout);
    const home = turns[0][2];
    for (const t of turns.slice(1)) {
      assert.equal(t[2], home, stdout);
      const [cached, prompt] = t[4].split('/').map(Number);
      assert.ok(cached / prompt > 0.8, `turn ${t[0]} found ${t[4]} cached\n${stdout}`);
    }
    assert.match(stdout, new RegExp(`ran on ${home} every turn: its prompt cache stayed warm`), stdout);
    // demo-b's engine is 4× slower than the others: cold work runs elsewhere, and the text says so.
    for (const [, executor, route] of cold) if (route !== 'session') assert.notEqual(executor, 'demo-b', stdout);
    assert.match(stdout, /Cold requests ran on .*never on demo-b/, stdout);
    // Every route the tables show is explained.
    for (const route of new Set([...turns.map((t) => t[3]), ...cold.map((c) => c[2])])) assert.match(stdout, new RegExp(`route "${route}" ×\\d+: `), stdout);
  });
});
