import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, afterEach, describe, test } from 'node:test';
import { request } from 'undici';
import type { BackendInfo } from '../../src/engines/backend.ts';
import { engineEnv, engineHost, hideFromEngines, LlamacppBackend, llamaServerArgs, type LlamacppOptions } from '../../src/engines/llamacpp/llamacpp.ts';
import { LoadLock } from '../../src/engines/load-lock.ts';
import { FAKE_LLAMA_SERVER } from '../fakes/fake-engine.ts';
import { waitFor } from '../fakes/wait.ts';
import { scriptArgs } from '../helpers/script.ts';

const dir = mkdtempSync(path.join(os.tmpdir(), 'viiwork-llamacpp-test-'));
after(() => rmSync(dir, { recursive: true, force: true }));

/** pids of live processes whose command line contains `marker` (zombies excluded). */
function processesWith(marker: string): number[] {
  const out: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const cmd = readFileSync(`/proc/${name}/cmdline`, 'utf8');
      if (!cmd.includes(marker)) continue;
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      if (/\) Z /.test(stat)) continue;
      out.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

interface Made {
  b: LlamacppBackend;
  lines: string[];
  marker: string;
}
const made: Made[] = [];

/** A backend on the fake llama-server with a unique model path (the marker that finds its processes). */
function make(opts: LlamacppOptions & { env?: Record<string, string>; idx?: number; startupTimeoutMs?: number; args?: string[]; binary?: string } = {}): Made {
  const marker = `model-${randomBytes(6).toString('hex')}.gguf`;
  const idx = opts.idx ?? 0;
  const info: BackendInfo = { id: `m/${idx}`, model: 'm', index: idx, parallel: 2, context: 1024, engine: 'llamacpp' };
  const lines: string[] = [];
  const b = new LlamacppBackend(
    info,
    { workloads: ['chat', 'completion'], audio: false },
    { binary: opts.binary ?? FAKE_LLAMA_SERVER, args: opts.args ?? [], path: path.join(dir, marker), startupTimeoutMs: opts.startupTimeoutMs ?? 15_000 },
    (msg) => void lines.push(msg),
    { healthIntervalMs: 50, loadPollMs: 25, probeTimeoutMs: 2000, killTimeoutMs: 5000, restartDelayMs: 20, loadLock: new LoadLock(), ...opts, env: { FAKE_LOAD_MS: '150', ...opts.env } },
  );
  const m = { b, lines, marker };
  made.push(m);
  return m;
}

afterEach(async () => {
  for (const m of made.splice(0)) {
    await m.b.stop();
    assert.deepEqual(processesWith(m.marker), [], `no process of ${m.b.id} is left`);
  }
});

const T = { timeoutMs: 20_000 };

describe('LlamacppBackend', () => {
  test('starts: starting while the engine answers 503, then healthy; args, build info and prefixed output', async () => {
    const { b, lines } = make({ args: ['--flash-attn', '--threads', '1'], env: { FAKE_LOAD_MS: '400', FAKE_BUILD: 'b5123-cafe' } });
    const states: string[] = [];
    b.on('state', (s: string) => states.push(s));
    let sawLoading = false;
    b.on('spawn', () => {
      // The engine answers 503 while it loads; the backend is 'starting' throughout.
      void waitFor(async () => {
        if (!b.url) return false;
        const r = await request(`${b.url}/health`).catch(() => undefined);
        await r?.body.dump();
        return r?.statusCode === 503;
      }, T).then(() => (sawLoading = b.state === 'starting' || sawLoading));
    });
    await b.start();
    assert.equal(b.state, 'healthy');
    assert.ok(states.includes('starting'));
    assert.ok(sawLoading, 'saw the 503 loading phase while starting');
    assert.equal(b.buildInfo, 'b5123-cafe');
    assert.equal(b.buildNumber, 5123);

    const st = (await (await request(`${b.url}/_control/state`)).body.json()) as { argv: string[]; pid: number };
    const url = new URL(b.url!);
    assert.deepEqual(st.argv, llamaServerArgs({ path: st.argv[1], args: ['--flash-attn', '--threads', '1'] }, url.hostname, Number(url.port), 2, 1024));
    assert.equal(st.argv[st.argv.indexOf('--ctx-size') + 1], '2048');
    // On loopback, and on Linux an address of its own (engineHost), so no other engine shares its port.
    assert.match(st.argv[st.argv.indexOf('--host') + 1], process.platform === 'linux' ? /^127\.(6[4-9]|[7-9]\d|1[01]\d|12[0-7])\.\d+\.\d+$/ : /^127\.0\.0\.1$/);
    assert.equal(st.pid, b.pid);

    await waitFor(() => lines.some((l) => l.startsWith('[m/0] main: model loaded')), { ...T, what: 'prefixed stderr line' });
    await waitFor(() => lines.some((l) => l.startsWith('[m/0] fake-llama-server: args')), { ...T, what: 'prefixed stdout line' });
    assert.ok(lines.some((l) => l.includes('llama-server build b5123-cafe')));
  });

  test('stop() sends SIGTERM, waits for the exit and leaves no process', async () => {
    const { b, lines, marker } = make();
    await b.start();
    const pid = b.pid!;
    assert.deepEqual(processesWith(marker), [pid]);
    const exit = new Promise<{ code: number | null; signal: string | null }>((r) => b.once('exit', r));
    await b.stop();
    assert.equal(b.state, 'stopped');
    assert.deepEqual(await exit, { pid, code: 0, signal: null });
    assert.deepEqual(processesWith(marker), []);
    await waitFor(() => lines.some((l) => l === '[m/0] fake-llama-server: received SIGTERM, shutting down'), { ...T, what: 'SIGTERM seen by the engine' });
  });

  test('stop() sends SIGKILL when the engine ignores SIGTERM for killTimeoutMs', async () => {
    const { b, lines, marker } = make({ killTimeoutMs: 300, env: { FAKE_IGNORE_SIGTERM: '1' } });
    await b.start();
    await b.stop();
    assert.deepEqual(processesWith(marker), []);
    assert.ok(lines.some((l) => l.includes('ignored SIGTERM') && l.includes('SIGKILL')));
  });

  test('the mesh secrets never reach the engine environment', async () => {
    const saved = { a: process.env.VIIWORK_MESH_SECRET, b: process.env.VIIWORK_MESH_SECRET_PREV };
    process.env.VIIWORK_MESH_SECRET = 'c2VjcmV0';
    process.env.VIIWORK_MESH_SECRET_PREV = 'b2xk';
    try {
      const { b } = make({ env: { VIIWORK_MESH_SECRET_PREV: 'from-opts', FAKE_MARK: 'kept' } });
      await b.start();
      const env = (await (await request(`${b.url}/_control/env`)).body.json()) as Record<string, string>;
      assert.equal(env.VIIWORK_MESH_SECRET, undefined);
      assert.equal(env.VIIWORK_MESH_SECRET_PREV, undefined);
      assert.equal(env.FAKE_MARK, 'kept');
      assert.equal(env.PATH, process.env.PATH);
    } finally {
      if (saved.a === undefined) delete process.env.VIIWORK_MESH_SECRET;
      else process.env.VIIWORK_MESH_SECRET = saved.a;
      if (saved.b === undefined) delete process.env.VIIWORK_MESH_SECRET_PREV;
      else process.env.VIIWORK_MESH_SECRET_PREV = saved.b;
    }
    assert.deepEqual(Object.keys(engineEnv({}, { VIIWORK_MESH_SECRET: 'x', VIIWORK_MESH_SECRET_PREV: 'y', HOME: '/h' })), ['HOME']);
    // Key variables the config names (client keys, other engines' keys) are hidden the same way.
    hideFromEngines('TEST_CLIENT_KEYS_X');
    assert.deepEqual(Object.keys(engineEnv({}, { TEST_CLIENT_KEYS_X: 'k', VIIWORK_API_KEY: 'c', HOME: '/h' })), ['HOME']);
  });

  test('a crash restarts the engine, which becomes healthy again', async () => {
    const { b, lines, marker } = make();
    const restarts: string[] = [];
    b.on('restart', (r: string) => restarts.push(r));
    await b.start();
    const pid1 = b.pid!;
    await (await request(`${b.url}/_control/crash`, { method: 'POST' })).body.dump();
    await waitFor(() => b.state !== 'healthy', { ...T, what: 'noticed the crash' });
    await waitFor(() => b.state === 'healthy' && b.pid !== pid1, { ...T, what: 'healthy again with a new process' });
    assert.equal(b.restarts, 1);
    assert.equal(restarts.length, 1);
    assert.match(restarts[0], /exited with code 1|connection refused|connection reset/);
    assert.ok(lines.some((l) => l.includes('healthy → unhealthy')));
    assert.deepEqual(processesWith(marker), [b.pid]);
  });

  test('an engine that crashes once then stays up (FAKE_CRASH_FILE "1") is restarted once', async () => {
    const crashFile = path.join(dir, `crash-${randomBytes(4).toString('hex')}`);
    writeFileSync(crashFile, '1');
    const { b, lines } = make({ env: { FAKE_CRASH_FILE: crashFile } });
    await b.start();
    assert.equal(b.state, 'healthy');
    assert.equal(b.restarts, 1);
    assert.ok(lines.some((l) => l.includes('[m/0] fake-llama-server: crashing')));
  });

  test('an engine that keeps crashing is marked dead after three restarts, with a plain log line', async () => {
    const crashFile = path.join(dir, `crash-${randomBytes(4).toString('hex')}`);
    writeFileSync(crashFile, 'always');
    const { b, lines, marker } = make({ env: { FAKE_CRASH_FILE: crashFile } });
    const spawns: number[] = [];
    b.on('spawn', (s: { pid: number }) => spawns.push(s.pid));
    await b.start();
    assert.equal(b.state, 'dead');
    assert.equal(spawns.length, 4);
    assert.equal(b.restarts, 3);
    const line = lines.find((l) => l.startsWith('backend m/0 is dead: '));
    assert.ok(line, `dead line in:\n${lines.join('\n')}`);
    assert.match(line!, /^backend m\/0 is dead: failed 4 times in 10m \(3 restarts\); last: llama-server exited with code 1.*; fix the engine and send SIGHUP or restart viiwork$/);
    await waitFor(() => processesWith(marker).length === 0, { ...T, what: 'no process left' });
    // revive() clears the budget and tries again; the engine now crashes once more, then stays up.
    writeFileSync(crashFile, '1');
    await b.revive();
    assert.equal(b.state, 'healthy');
    assert.equal(b.restarts, 4);
  });

  test('a healthy run refills the restart budget', async () => {
    const { b, lines } = make({ stableAfterMs: 200 });
    await b.start();
    const pid1 = b.pid!;
    await (await request(`${b.url}/_control/crash`, { method: 'POST' })).body.dump();
    await waitFor(() => b.state === 'healthy' && b.pid !== pid1, { ...T, what: 'healthy again' });
    assert.equal(b.restartsInWindow, 1);
    await waitFor(() => b.restartsInWindow === 0, { ...T, what: 'budget refilled' });
    assert.ok(lines.some((l) => l.includes('restart budget refilled')));
    assert.equal(b.restarts, 1);
  });

  test('three failed health checks in a row restart the engine', async () => {
    const { b } = make();
    const restarts: string[] = [];
    b.on('restart', (r: string) => restarts.push(r));
    await b.start();
    const pid1 = b.pid!;
    await (await request(`${b.url}/_control/health?status=500`, { method: 'POST' })).body.dump();
    await waitFor(() => b.state === 'unhealthy', { ...T, what: 'unhealthy after one failed check' });
    await waitFor(() => restarts.length === 1, { ...T, what: 'restart' });
    assert.match(restarts[0], /3 health checks failed in a row; last GET \/health: 500/);
    await waitFor(() => b.state === 'healthy' && b.pid !== pid1, { ...T, what: 'healthy with a new process' });
  });

  test('exceeding startup_timeout restarts the engine, and a budget of such failures ends dead', async () => {
    const { b, marker } = make({ startupTimeoutMs: 300, maxRestarts: 1, env: { FAKE_LOAD_MS: '600000' } });
    const restarts: string[] = [];
    b.on('restart', (r: string) => restarts.push(r));
    await b.start();
    assert.equal(b.state, 'dead');
    assert.equal(restarts.length, 1);
    // The last probe is "503 Loading model", or a refused connection when a loaded machine took longer than
    // 300 ms to start the fake server at all: either way the engine was not healthy in time.
    assert.match(restarts[0], /not healthy 300ms after start \(startup_timeout\); last GET \/health: (503 Loading model|.*(refused|ECONNREFUSED|no answer))/);
    assert.match(b.reason, /startup_timeout/);
    await waitFor(() => processesWith(marker).length === 0, { ...T, what: 'no process left' });
  });

  test('two replicas load one at a time: the second is spawned only once the first is healthy', async () => {
    const lock = new LoadLock();
    const a = make({ idx: 0, loadLock: lock, env: { FAKE_LOAD_MS: '300' } });
    const c = make({ idx: 1, loadLock: lock, env: { FAKE_LOAD_MS: '300' } });
    const events: string[] = [];
    for (const [name, m] of [
      ['a', a],
      ['c', c],
    ] as const) {
      m.b.on('spawn', () => events.push(`${name}:spawn`));
      m.b.on('state', (s: string) => s === 'healthy' && events.push(`${name}:healthy`));
    }
    await Promise.all([a.b.start(), c.b.start()]);
    assert.deepEqual(events, ['a:spawn', 'a:healthy', 'c:spawn', 'c:healthy']);
    assert.equal(lock.held, false);
    // Each on an address of its own (Linux), so a port bind(0) hands out twice never joins two engines.
    if (process.platform === 'linux') assert.notEqual(new URL(a.b.url!).hostname, new URL(c.b.url!).hostname);
  });

  test('stop() while waiting for the load lock spawns nothing', async () => {
    const lock = new LoadLock();
    const a = make({ idx: 0, loadLock: lock, env: { FAKE_LOAD_MS: '600000' } });
    const c = make({ idx: 1, loadLock: lock });
    let spawned = false;
    c.b.on('spawn', () => (spawned = true));
    const aStart = a.b.start();
    await waitFor(() => a.b.pid !== undefined, { ...T, what: 'first spawned' });
    const cStart = c.b.start();
    await waitFor(() => /waiting for m\/0/.test(c.b.reason), { ...T, what: 'second waiting' });
    await c.b.stop();
    await cStart;
    assert.equal(c.b.state, 'stopped');
    assert.equal(spawned, false);
    await a.b.stop();
    await aStart;
    assert.equal(lock.held, false);
  });

  test('a binary that cannot be run is dead at once', async () => {
    const { b, lines } = make({ binary: path.join(dir, 'no-such-llama-server') });
    await b.start();
    assert.equal(b.state, 'dead');
    assert.ok(lines.some((l) => /^backend m\/0 is dead: cannot run .*no-such-llama-server: ENOENT/.test(l)));
  });
});

describe('engineHost: where an engine listens', () => {
  // llama-server binds with SO_REUSEPORT: two given one port both start and share its connections, so each gets an address.
  test('on Linux an address in 127.64.0.0/10, drawn from the random source; elsewhere 127.0.0.1', () => {
    assert.equal(engineHost('linux', () => 0), '127.64.0.1');
    assert.equal(engineHost('linux', () => 0.999999), '127.127.255.254');
    assert.equal(engineHost('darwin', () => 0.5), '127.0.0.1');
    assert.equal(engineHost('win32', () => 0.5), '127.0.0.1');
    const seen = new Set(Array.from({ length: 200 }, () => engineHost('linux')));
    assert.ok(seen.size > 190, `200 draws gave ${seen.size} addresses`);
  });
});

describe('LlamacppBackend orphans', () => {
  test('a node process that exits without stopping its backends leaves no engine behind', async () => {
    const { execFile } = await import('node:child_process');
    const fixture = scriptArgs(new URL('../fakes/exit-without-stop.ts', import.meta.url));
    const marker = `model-${randomBytes(6).toString('hex')}.gguf`;
    const stdout = await new Promise<string>((resolve, reject) =>
      execFile(process.execPath, [...fixture, path.join(dir, marker)], { timeout: 30_000 }, (err, out) => (err ? reject(err) : resolve(out))),
    );
    const [state, pid] = stdout.trim().split(' ');
    assert.equal(state, 'healthy');
    assert.ok(Number(pid) > 0);
    await waitFor(() => processesWith(marker).length === 0, { ...T, what: 'engine killed by the exit hook' });
  });
});
