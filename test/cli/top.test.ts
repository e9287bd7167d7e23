/**
 * Issue 27, item 6: the CLI's views over time, under real tmux. A
 * three-node mesh of real processes under load; `viiwork status` ends with a
 * sparkline per host of the last 15 minutes; `viiwork top` draws hosts,
 * slots, queues, sparklines and recent requests, redraws in place (the
 * pane never scrolls), and quits on q.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { waitFor } from '../fakes/wait.ts';
import { startLoad, type Load } from '../helpers/load.ts';
import { startSeeded, stopAll, waitModelOn, type MeshNode } from '../helpers/mesh.ts';

const HAVE_TMUX = spawnSync('tmux', ['-V']).status === 0;
const SOCKET = `viiwork-test-27-${process.pid}`;
const BIN = path.resolve('bin/viiwork.js');
const SHOTS = path.join(process.env.TEST_OUTPUT_DIR ?? os.tmpdir(), 'viiwork-ui');
const IP = (i: number) => `127.0.27.${i}`;
const HOSTS = ['tp-a', 'tp-b', 'tp-c'];
// A fresh mesh has history only for its last steps (each mark is 30 s): at least one mark, right-aligned in its 30 columns.
const SPARK = /[▁▂▃▄▅▆▇█]/;

const tmux = (...args: string[]) => spawnSync('tmux', ['-L', SOCKET, ...args], { encoding: 'utf8' });
const capture = (target: string, history = false) => tmux('capture-pane', '-p', '-t', target, ...(history ? ['-S', '-2000'] : [])).stdout;

describe('viiwork status and top under tmux', { skip: HAVE_TMUX ? false : 'tmux is not installed (apt-get install tmux); skipping the terminal views' }, () => {
  const nodes: MeshNode[] = [];
  let load: Load | undefined;

  before(async () => {
    await startSeeded(
      nodes,
      HOSTS.map((name, i) => ({ name, ip: IP(70 + i), models: [{ name: 'chat-sim', engine: 'sim', parallel: 2, workloads: ['chat'], sim: { ttft_ms: 30, prefill_ms_per_1k: 5, tokens_per_s: 400, output_tokens: 8 } }] })),
    );
    await waitModelOn(nodes[0], 'chat-sim', HOSTS);
    load = startLoad(nodes[0].url, 'chat-sim', 5);
    await waitFor(() => (load!.answered.get(200) ?? 0) > 20, { timeoutMs: 60_000, what: 'requests answered' });
    fs.mkdirSync(SHOTS, { recursive: true });
  });
  after(async () => {
    tmux('kill-server');
    await load?.stop();
    await stopAll(nodes);
  });

  it('status ends with the last 15 minutes as a sparkline per host', async () => {
    tmux('new-session', '-d', '-s', 'status', '-x', '160', '-y', '50', `${process.execPath} ${BIN} status --url ${nodes[0].url}; sleep 600`);
    const screen = await waitFor(() => (/last 15 minutes/.test(capture('status')) ? capture('status') : null), { timeoutMs: 20_000, what: 'status printed' });
    fs.writeFileSync(path.join(SHOTS, 'status.txt'), screen);
    const section = screen.slice(screen.indexOf('last 15 minutes'));
    for (const h of HOSTS) {
      const line = section.split('\n').find((l) => l.startsWith(h));
      assert.ok(line, `a line for ${h}:\n${section}`);
      assert.match(line, SPARK, `${h} has a sparkline: ${line}`);
      assert.match(line, /\/s/, 'with its latest rate');
    }
  });

  it('top shows hosts, slots, queues, sparklines and recent requests, redraws in place and quits on q', async () => {
    tmux('new-session', '-d', '-s', 'top', '-x', '160', '-y', '50', `${process.execPath} ${BIN} top --url ${nodes[0].url} --interval 1`);
    const first = await waitFor(
      () => {
        const s = capture('top');
        return HOSTS.every((h) => new RegExp(`^${h}\\s+\\d+/2\\s+\\d+\\s+fresh`, 'm').test(s)) && SPARK.test(s) && /RECENT REQUESTS/.test(s) && /chat-sim\s+\S+\s+\d+ ms\s+200/.test(s) ? s : null;
      },
      { timeoutMs: 30_000, intervalMs: 200, what: 'top drawn with hosts, sparklines and requests' },
    ).catch((err) => {
      throw new Error(`${(err as Error).message}; the pane showed:\n${capture('top')}`);
    });
    fs.writeFileSync(path.join(SHOTS, 'top.txt'), first);
    assert.match(first.split('\n')[0], /^viiwork top — tp-a at /, 'the header is on the first line');
    const clock = (s: string) => /(\d\d:\d\d:\d\d) UTC/.exec(s.split('\n')[0])?.[1];
    await waitFor(() => clock(capture('top')) !== clock(first), { timeoutMs: 15_000, what: 'a redraw' });
    await waitFor(() => clock(capture('top')) !== undefined, { timeoutMs: 5000, what: 'a whole screen' });
    assert.equal(capture('top', true).split('viiwork top —').length - 1, 1, 'redrawn in place: one header in the whole scrollback');
    tmux('send-keys', '-t', 'top', 'q');
    await waitFor(() => tmux('has-session', '-t', 'top').status !== 0, { timeoutMs: 10_000, what: 'top quits on q' });
  });
});
