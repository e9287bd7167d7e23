#!/usr/bin/env node
// A stand-in for llama.cpp's llama-server, for tests of the llamacpp engine.
// Plain JavaScript: runs with `node` alone, no tsx.
//
// CLI (as llama-server): --model/-m PATH, --host H (default 127.0.0.1),
// --port N (default 8080), --parallel/-np N (default 1), --ctx-size/-c N;
// any other argument is ignored.
//
// It serves the OpenAI API of fake-engine-core.mjs. /props answers
// total_slots = --parallel and n_ctx = ctx-size ÷ parallel.
//
// `--help` prints a short usage without `--cache-ram` (FAKE_HELP: another text) and exits.
//
// Environment:
//   FAKE_LOAD_MS         /health answers 503 "Loading model" this long after start (default 300).
//   FAKE_BUILD           /props build_info (default "b4500-abcdef").
//   FAKE_CRASH_AFTER_MS  exit 1 this long after start, every run.
//   FAKE_CRASH_FILE      a file that decides whether this run crashes. When it
//                        exists at start, its content says how:
//                          "always" (or empty)  crash on every run; the file stays
//                          N (an integer)       crash while N > 0; each crash
//                                               rewrites the file with N-1, so "1"
//                                               crashes once then stays up
//                        No file, or N <= 0: no crash.
//   FAKE_CRASH_WHEN      when a crashing run exits 1: "start" (default: at once,
//                        before listening) or "loaded" (when loading ends).
//   FAKE_IGNORE_SIGTERM  "1": ignore SIGTERM (only SIGKILL ends it).
//   FAKE_OUTPUT_TOKENS, FAKE_CHUNK_DELAY_MS, FAKE_DELAY_MS: generation shape.
//   FAKE_KEEP_REQUESTS   "0": keep no record of requests (for tests that send huge bodies).
//   FAKE_TOKENIZE_MS     serve POST /tokenize (one token per character), answering after this many ms.
//
// Control endpoints (besides the fake engine's): POST /_control/crash (exit 1
// at once), /_control/hold[?on=0], /_control/release[?n=N|?all=1],
// /_control/fail-next?status=N, /_control/fail-mid-stream,
// /_control/loading?on=0|1, /_control/health?status=N (omit to clear),
// /_control/delay?ms=N; GET /_control/state (counters, pid, argv, parsed
// args) and GET /_control/env (this process's environment).
//
// Output: a few llama-server-like lines on stderr and stdout at start, one per
// inference request, and one at shutdown, so log prefixing can be tested.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { FakeEngine } from './fake-engine-core.mjs';

const argv = process.argv.slice(2);
// `--help` prints a usage and exits, as llama-server's does; like build 4748's, it lists no `--cache-ram` (the node
// then passes none and keeps one prompt per slot). FAKE_HELP replaces the text.
if (argv.includes('--help') || argv.includes('-h')) {
  process.stdout.write(process.env.FAKE_HELP ?? '-m, --model FNAME\n--host HOST\n--port PORT\n-np, --parallel N\n-c, --ctx-size N\n');
  process.exit(0);
}
const args = { model: undefined, host: '127.0.0.1', port: 8080, parallel: 1, ctxSize: 4096 };
for (let i = 0; i < argv.length; i++) {
  const a = argv[i];
  const next = () => argv[++i];
  if (a === '--model' || a === '-m') args.model = next();
  else if (a === '--host') args.host = next();
  else if (a === '--port') args.port = Number(next());
  else if (a === '--parallel' || a === '-np') args.parallel = Number(next());
  else if (a === '--ctx-size' || a === '-c') args.ctxSize = Number(next());
}

const env = process.env;
const num = (v, d) => (v !== undefined && v !== '' && Number.isFinite(Number(v)) ? Number(v) : d);
const loadMs = num(env.FAKE_LOAD_MS, 300);
const build = env.FAKE_BUILD || 'b4500-abcdef';

// Output to a node that has died must not end the engine: a real llama-server left behind keeps serving.
process.stdout.on('error', () => {});
process.stderr.on('error', () => {});
const err = (line) => process.stderr.write(`${line}\n`);
const out = (line) => process.stdout.write(`${line}\n`);

function crashThisRun() {
  const file = env.FAKE_CRASH_FILE;
  if (!file || !existsSync(file)) return false;
  const content = readFileSync(file, 'utf8').trim();
  if (content === '' || content === 'always') return true;
  const n = Number(content);
  if (!Number.isInteger(n) || n <= 0) return false;
  writeFileSync(file, String(n - 1));
  return true;
}

function crash(why) {
  err(`fake-llama-server: crashing: ${why}`);
  process.exit(1);
}

const bm = /^b(\d+)-(.*)$/.exec(build);
err(`build: ${bm ? bm[1] : '0'} (${bm ? bm[2] : build}) with fake-node for ${process.arch}`);
err(`system info: n_threads = 1, pid = ${process.pid}`);
out(`fake-llama-server: args ${JSON.stringify(args)}`);

const crashing = crashThisRun();
const crashWhen = env.FAKE_CRASH_WHEN === 'loaded' ? 'loaded' : 'start';
if (crashing && crashWhen === 'start') crash('FAKE_CRASH_FILE says so (at start)');

if (env.FAKE_IGNORE_SIGTERM === '1') {
  process.on('SIGTERM', () => err('fake-llama-server: ignoring SIGTERM'));
} else {
  process.on('SIGTERM', () => {
    err('fake-llama-server: received SIGTERM, shutting down');
    engine.close().finally(() => process.exit(0));
  });
}
process.on('SIGINT', () => process.exit(0));

const engine = new FakeEngine({
  host: args.host,
  port: args.port,
  model: args.model ? args.model.split('/').pop().replace(/\.gguf$/i, '') : 'fake-model',
  modelPath: args.model,
  name: `fake-llama-server-${process.pid}`,
  buildInfo: build,
  totalSlots: args.parallel,
  contextPerSlot: Math.floor(args.ctxSize / Math.max(1, args.parallel)),
  loadingMs: 0,
  delayMs: num(env.FAKE_DELAY_MS, 0),
  chunkDelayMs: num(env.FAKE_CHUNK_DELAY_MS, 0),
  outputTokens: num(env.FAKE_OUTPUT_TOKENS, 4),
  keepRequests: env.FAKE_KEEP_REQUESTS !== '0',
  ...(env.FAKE_TOKENIZE_MS !== undefined ? { tokenizeMs: num(env.FAKE_TOKENIZE_MS, 0) } : {}),
  control: true,
  onCrash: () => setImmediate(() => crash('POST /_control/crash')),
  info: () => ({ pid: process.pid, argv, args, build }),
  env: () => ({ ...process.env }),
});

engine.on('request', (r) => {
  if (r.method === 'POST' && !r.path.startsWith('/_control/')) err(`srv  log_server_r: request: ${r.method} ${r.path} 127.0.0.1`);
});
try {
  engine.setLoading(loadMs > 0);
  await engine.start();
} catch (e) {
  err(`fake-llama-server: cannot listen on ${args.host}:${args.port}: ${e.message}`);
  process.exit(1);
}
err(`main: HTTP server is listening, hostname: ${args.host}, port: ${engine.port}, http threads: 1`);
err(`main: loading model '${args.model ?? '(none)'}'`);

function loaded() {
  engine.setLoading(false);
  if (crashing && crashWhen === 'loaded') crash('FAKE_CRASH_FILE says so (after load)');
  err('main: model loaded');
  err(`main: server is listening on http://${args.host}:${engine.port} - starting the main loop`);
  out('srv  update_slots: all slots are idle');
}
if (loadMs > 0) setTimeout(loaded, loadMs);
else loaded();

const crashAfter = num(env.FAKE_CRASH_AFTER_MS, undefined);
if (crashAfter !== undefined) setTimeout(() => crash(`FAKE_CRASH_AFTER_MS=${crashAfter}`), crashAfter);
