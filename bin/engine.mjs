#!/usr/bin/env node
// `npm run engine`: builds llama.cpp's `llama-server` and `ggml-rpc-server`
// from the source node-llama-cpp ships (llama/gitRelease.bundle), with the
// system's git, cmake and C++ compiler, CPU only, no network, into a cache
// directory keyed by the bundle's hash (bin/engine-cache.mjs). The project
// builds its engine from what the npm registry ships so that every machine
// (CI included) tests against the same llama.cpp, and never downloads a
// prebuilt binary.
//
// Build output and progress go to stderr; the last line of stdout is the
// absolute path of llama-server (at once when the build is cached), so
// `LLAMA=$(node bin/engine.mjs)` works. The build runs in a temporary
// directory beside the cache and is renamed into place only when both
// binaries exist, so an interrupted build never leaves a half cache.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { bundlePath, buildDir, cacheKey, cacheRoot, cachedLlamaServer, enginePaths, RECIPE } from './engine-cache.mjs';

// Flags, and why each one. x86-64-v3 (AVX2, FMA, F16C, BMI2) is the baseline
// instead of -march=native: a binary built on one machine runs on any
// machine of the last decade, and the cache can be copied between them.
function cmakeFlags() {
  const flags = [
    '-DCMAKE_BUILD_TYPE=Release',
    // One self-contained binary per tool: no libllama.so/libggml.so to find at run time.
    '-DBUILD_SHARED_LIBS=OFF',
    '-DGGML_NATIVE=OFF',
    // The RPC backend: ggml-rpc-server, and `--rpc` in llama-server (SPEC 3).
    '-DGGML_RPC=ON',
    // CPU only: the GPU backends are off by default; these make it explicit.
    '-DGGML_CUDA=OFF', '-DGGML_VULKAN=OFF', '-DGGML_METAL=OFF', '-DGGML_BLAS=OFF',
    // No network, ever: the web UI would otherwise be fetched from a Hugging Face
    // bucket at build time (scripts/ui-assets.cmake), HTTPS is only for downloading
    // models (-hf). Nothing else in the CPU build fetches (KleidiAI is ARM-only and off).
    // (LLAMA_CURL no longer exists in this source: it is deprecated and ignored.)
    '-DLLAMA_USE_PREBUILT_UI=OFF', '-DLLAMA_BUILD_UI=OFF', '-DLLAMA_OPENSSL=OFF',
    '-DLLAMA_BUILD_TESTS=OFF', '-DLLAMA_BUILD_EXAMPLES=OFF', '-DLLAMA_BUILD_SERVER=ON', '-DLLAMA_BUILD_TOOLS=ON',
    // ccache would make a second build differ from a clean one by what the machine happened to cache.
    '-DGGML_CCACHE=OFF',
  ];
  if (os.arch() === 'x64') {
    flags.push('-DGGML_SSE42=ON', '-DGGML_AVX=ON', '-DGGML_AVX2=ON', '-DGGML_FMA=ON', '-DGGML_F16C=ON', '-DGGML_BMI2=ON',
      '-DGGML_AVX512=OFF', '-DGGML_AVX_VNNI=OFF');
  }
  return flags;
}

const TARGETS = ['llama-server', 'ggml-rpc-server'];

// `--pretest` (npm test's pretest): outside CI a machine that cannot build the
// engine still runs the other tests, and the real-engine ones skip saying why;
// under CI every failure here fails the run.
const PRETEST = process.argv.includes('--pretest');
const CI = !!process.env.CI && !['0', 'false'].includes(process.env.CI.trim().toLowerCase());

function fail(message) {
  process.stderr.write(`npm run engine: ${message}\n`);
  if (PRETEST && !CI) {
    process.stderr.write('npm run engine: carrying on without the engine: the real-engine tests will skip (under CI=true they fail)\n');
    process.exit(0);
  }
  process.exit(1);
}

function has(cmd, args = ['--version']) {
  const r = spawnSync(cmd, args, { stdio: 'ignore' });
  return r.status === 0;
}

function checkTools() {
  const missing = [];
  if (!has('git')) missing.push('git');
  if (!has('cmake')) missing.push('cmake');
  const cxx = process.env.CXX || 'c++';
  if (!has(cxx) && !has('g++')) missing.push('g++');
  if (!has('make') && !has('ninja')) missing.push('make');
  if (missing.length) {
    fail(`${missing.join(', ')} not found: building llama-server needs them (on Debian/Ubuntu: sudo apt-get install ${missing.join(' ')})`);
  }
}

/** Removes the temporary directories of builds whose process is gone (a build killed before its cleanup ran). */
function sweepStale(root) {
  let names = [];
  try { names = fs.readdirSync(root); } catch { return; }
  for (const name of names) {
    const m = /^\.tmp-.*-(\d+)$/.exec(name);
    if (!m) continue;
    const pid = Number(m[1]);
    let alive = true;
    try { process.kill(pid, 0); } catch (e) { alive = e.code === 'EPERM'; }
    if (!alive) fs.rmSync(path.join(root, name), { recursive: true, force: true });
  }
}

// The command running now, so a signal can stop its whole process group (make and its compilers) before the cleanup.
let current;

/** Runs a command with its output streamed to stderr and appended to the build log; resolves on success. */
function run(cmd, args, log, opts = {}) {
  return new Promise((resolve, reject) => {
    fs.appendFileSync(log, `\n$ ${cmd} ${args.join(' ')}\n`);
    const child = spawn(cmd, args, { ...opts, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    current = child;
    child.on('exit', () => { if (current === child) current = undefined; });
    const out = fs.openSync(log, 'a');
    const tee = (chunk) => { process.stderr.write(chunk); fs.writeSync(out, chunk); };
    child.stdout.on('data', tee);
    child.stderr.on('data', tee);
    child.on('error', (e) => { fs.closeSync(out); reject(e); });
    child.on('close', (code, signal) => {
      fs.closeSync(out);
      if (code === 0) resolve();
      else reject(new Error(`${cmd} ${args[0]} failed (${signal ?? `exit ${code}`})`));
    });
  });
}

async function main() {
  const bundle = bundlePath();
  if (!fs.existsSync(bundle)) {
    fail(`${bundle} is missing: the llama.cpp source comes with the node-llama-cpp package; run \`npm ci\` first (node-llama-cpp is an optional dependency: do not install with --omit=optional)`);
  }
  const cached = cachedLlamaServer();
  if (cached && !process.argv.includes('--force')) {
    process.stdout.write(`${cached}\n`);
    return;
  }
  checkTools();

  const root = cacheRoot();
  const key = cacheKey();
  const dest = buildDir();
  fs.mkdirSync(root, { recursive: true });
  sweepStale(root);
  // Beside the cache, so the final rename stays on one filesystem.
  const tmp = path.join(root, `.tmp-${key}-${process.pid}`);
  fs.rmSync(tmp, { recursive: true, force: true });
  fs.mkdirSync(tmp);
  const cleanup = () => fs.rmSync(tmp, { recursive: true, force: true, maxRetries: 5 });
  // Interrupted: stop the compilers first (they would keep writing into the
  // directory being removed), then remove the temporary build; the cache
  // itself was never touched.
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
    process.on(sig, () => {
      const child = current;
      const finish = () => { cleanup(); process.stderr.write(`[engine] interrupted (${sig}); nothing was cached\n`); process.exit(130); };
      if (!child) return finish();
      child.once('exit', finish);
      try { process.kill(-child.pid, 'SIGTERM'); } catch { finish(); }
    });
  }

  const log = path.join(tmp, 'build.log');
  const src = path.join(tmp, 'src');
  const build = path.join(tmp, 'build');
  const out = path.join(tmp, 'out');
  const jobs = Number(process.env.VIIWORK_ENGINE_JOBS) || os.availableParallelism();
  const t0 = performance.now();
  const say = (line) => { process.stderr.write(`[engine] ${line}\n`); fs.appendFileSync(log, `[engine] ${line}\n`); };
  say(`building llama-server and ggml-rpc-server from ${bundle}`);
  say(`into ${dest} (${jobs} jobs; about 8 minutes on 2 cores)`);
  try {
    await run('git', ['-c', 'advice.detachedHead=false', 'clone', '--quiet', bundle, src], log);
    say('configuring');
    await run('cmake', ['-S', src, '-B', build, ...cmakeFlags()], log);
    say('compiling');
    await run('cmake', ['--build', build, '--config', 'Release', '-j', String(jobs), '--target', ...TARGETS], log);
  } catch (e) {
    const kept = path.join(root, 'last-failed-build.log');
    try { fs.copyFileSync(log, kept); } catch { /* the log is a courtesy */ }
    cleanup();
    fail(`${e.message}; the full log is in ${kept}`);
  }

  const bins = enginePaths(out);
  fs.mkdirSync(path.dirname(bins.llamaServer), { recursive: true });
  for (const target of TARGETS) {
    const built = path.join(build, 'bin', target);
    if (!fs.existsSync(built)) { cleanup(); fail(`the build finished without ${built}`); }
    fs.copyFileSync(built, path.join(out, 'bin', target));
    fs.chmodSync(path.join(out, 'bin', target), 0o755);
  }
  const version = spawnSync(bins.llamaServer, ['--version'], { encoding: 'utf8' });
  const seconds = Math.round((performance.now() - t0) / 1000);
  fs.writeFileSync(path.join(out, 'build.json'), JSON.stringify({
    bundle, key, recipe: RECIPE, flags: cmakeFlags(), targets: TARGETS, jobs, seconds,
    version: `${version.stdout ?? ''}${version.stderr ?? ''}`.trim(), built_at: new Date().toISOString(),
  }, null, 2) + '\n');
  fs.copyFileSync(log, path.join(out, 'build.log'));

  // --force replaces a finished build; without it a build only ever fills an empty place.
  if (process.argv.includes('--force')) fs.rmSync(dest, { recursive: true, force: true });
  try {
    fs.renameSync(out, dest);
  } catch (e) {
    // Another build of the same bundle finished first: its result is as good as ours.
    if (!(e.code === 'ENOTEMPTY' || e.code === 'EEXIST') || !cachedLlamaServer()) { cleanup(); throw e; }
  }
  cleanup();
  process.stderr.write(`[engine] built in ${seconds} s\n`);
  process.stdout.write(`${enginePaths(dest).llamaServer}\n`);
}

await main();
