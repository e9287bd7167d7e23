/**
 * `npm run engine` (bin/engine.mjs) and the test helper that finds what it
 * built (test/helpers/engine.ts), without a 8-minute compile: a fake
 * `cmake` on PATH stands in for the compiler, the rest (cloning the real
 * bundle, the cache key, the rename into place) is the script's own.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { waitFor } from '../fakes/wait.ts';
import { tempDir } from '../helpers/node.ts';
import { findLlamaServer, realLlamaServer } from '../helpers/engine.ts';
import { bundlePath, cacheKey } from '../../bin/engine-cache.mjs';

const SCRIPT = path.resolve('bin/engine.mjs');
const hasBundle = fs.existsSync(bundlePath());

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function runEngine(env: NodeJS.ProcessEnv, args: string[] = [], onStderr?: (text: string, kill: () => void) => void): Promise<Run> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [SCRIPT, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => {
      stderr += d;
      onStderr?.(stderr, () => child.kill('SIGINT'));
    });
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/** A PATH of stand-ins: the real git, and a cmake whose build writes two tiny "binaries" (or hangs, to be interrupted). */
function fakeToolchain(dir: string, opts: { hang?: boolean } = {}): string {
  const bin = path.join(dir, 'toolbin');
  fs.mkdirSync(bin, { recursive: true });
  for (const tool of ['git']) fs.symlinkSync(`/usr/bin/${tool}`, path.join(bin, tool));
  for (const tool of ['c++', 'make']) fs.writeFileSync(path.join(bin, tool), '#!/bin/sh\nexit 0\n', { mode: 0o755 });
  const server = '#!/bin/sh\\necho "version: 0.5.0-dev (build 1, commit de3ff81)"\\n';
  fs.writeFileSync(
    path.join(bin, 'cmake'),
    `#!/bin/sh
[ "$1" = "--version" ] && { echo "cmake version 3.25.1"; exit 0; }
if [ "$1" = "--build" ]; then
  echo "[ 50%] Building CXX object fake.o"
  ${opts.hang ? 'exec /bin/sleep 60' : ''}
  /bin/mkdir -p "$2/bin"
  for t in llama-server ggml-rpc-server; do printf '${server}' > "$2/bin/$t"; /bin/chmod +x "$2/bin/$t"; done
  echo "[100%] Built target llama-server"
fi
exit 0
`,
    { mode: 0o755 },
  );
  return bin;
}

describe('npm run engine', { skip: hasBundle ? false : 'node-llama-cpp is not installed (npm ci)' }, () => {
  it('builds into the cache key of the bundle, prints progress, and the path of llama-server last; then at once from the cache', async () => {
    const dir = tempDir('vw-engine-');
    const cache = path.join(dir, 'cache');
    // A build of a process that died long ago: swept.
    fs.mkdirSync(path.join(cache, `.tmp-${cacheKey()}-999999999`), { recursive: true });
    const env = { PATH: fakeToolchain(dir), HOME: dir, VIIWORK_ENGINE_CACHE: cache };
    const r = await runEngine(env);
    assert.equal(r.code, 0, r.stderr);
    const expected = path.join(cache, cacheKey()!, 'bin', 'llama-server');
    assert.equal(r.stdout.trim().split('\n').at(-1), expected);
    assert.match(r.stderr, /\[engine\] configuring[\s\S]*\[ 50%\] Building[\s\S]*\[engine\] built in \d+ s/);
    assert.ok(fs.existsSync(path.join(cache, cacheKey()!, 'bin', 'ggml-rpc-server')));
    const manifest = JSON.parse(fs.readFileSync(path.join(cache, cacheKey()!, 'build.json'), 'utf8'));
    assert.ok(manifest.flags.includes('-DGGML_RPC=ON') && manifest.flags.includes('-DGGML_NATIVE=OFF') && manifest.flags.includes('-DLLAMA_USE_PREBUILT_UI=OFF'));
    assert.match(manifest.version, /0\.5\.0-dev/);
    assert.deepEqual(fs.readdirSync(cache).sort(), [cacheKey()], 'no temporary directory is left');

    // Cached: the path at once, no tool asked for (an empty PATH).
    const again = await runEngine({ HOME: dir, VIIWORK_ENGINE_CACHE: cache, PATH: '/nonexistent' });
    assert.equal(again.code, 0, again.stderr);
    assert.equal(again.stdout.trim(), expected);
    assert.equal(again.stderr, '');

    // The test helper finds that very build; VIIWORK_LLAMA_SERVER wins over it.
    assert.deepEqual(findLlamaServer({ VIIWORK_ENGINE_CACHE: cache }), { binary: expected });
    const other = path.join(dir, 'my-llama-server');
    fs.writeFileSync(other, '#!/bin/sh\n', { mode: 0o755 });
    assert.deepEqual(findLlamaServer({ VIIWORK_ENGINE_CACHE: cache, VIIWORK_LLAMA_SERVER: other }), { binary: other });
    assert.equal(realLlamaServer({ VIIWORK_ENGINE_CACHE: cache, CI: 'true' }).skip, false);
  });

  it('an interrupted build leaves no half cache', async () => {
    const dir = tempDir('vw-engine-int-');
    const cache = path.join(dir, 'cache');
    const env = { PATH: fakeToolchain(dir, { hang: true }), HOME: dir, VIIWORK_ENGINE_CACHE: cache };
    let killed = false;
    const r = await runEngine(env, [], (text, kill) => {
      if (!killed && text.includes('[ 50%] Building')) {
        killed = true;
        kill();
      }
    });
    assert.ok(killed, r.stderr);
    assert.notEqual(r.code, 0);
    await waitFor(() => !fs.existsSync(cache) || fs.readdirSync(cache).length === 0, { timeoutMs: 5000, what: 'the temporary build removed' });
    assert.equal(findLlamaServer({ VIIWORK_ENGINE_CACHE: cache }).binary, undefined);
  });

  it('missing tools: the error names them and the apt-get line; npm test carries on outside CI and fails under it', async () => {
    const dir = tempDir('vw-engine-none-');
    const env = { PATH: path.join(dir, 'empty'), HOME: dir, VIIWORK_ENGINE_CACHE: path.join(dir, 'cache') };
    const r = await runEngine(env);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /git, cmake, g\+\+, make not found.*apt-get install git cmake g\+\+ make/);
    assert.equal(r.stdout, '');
    const pretest = await runEngine(env, ['--pretest']);
    assert.equal(pretest.code, 0, 'outside CI npm test runs the other tests');
    assert.match(pretest.stderr, /real-engine tests will skip/);
    const ci = await runEngine({ ...env, CI: 'true' }, ['--pretest']);
    assert.equal(ci.code, 1, 'under CI the missing engine fails the run');
  });
});

describe('the real-engine test helper without an engine', () => {
  it('skips with the fix outside CI, and fails under CI=true', () => {
    const env = { VIIWORK_ENGINE_CACHE: tempDir('vw-engine-empty-') };
    const found = findLlamaServer(env);
    assert.equal(found.binary, undefined);
    assert.match(found.missing!, /run `npm run engine`/);
    const outside = realLlamaServer(env);
    assert.match(String(outside.skip), /npm run engine/);
    assert.throws(() => realLlamaServer({ ...env, CI: 'true' }), /CI=true: a real-engine test fails rather than skips/);
    assert.match(findLlamaServer({ ...env, VIIWORK_LLAMA_SERVER: '/nonexistent/llama-server' }).missing!, /VIIWORK_LLAMA_SERVER=\/nonexistent\/llama-server is not an executable file/);
  });
});
