// Where `npm run engine` puts the llama-server it builds, and how a test
// finds it again: one module so the build script and the test helper can
// never disagree on the cache key.
//
// The key is the sha256 of node-llama-cpp's llama/gitRelease.bundle (the
// llama.cpp source) plus RECIPE, the version of our build flags: a new
// package pin or a change of flags gets a new directory, and an old build is
// never mistaken for the current one.
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** Bump when bin/engine.mjs's cmake flags change, so a cached build of other flags is not reused. */
export const RECIPE = 1;

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** The llama.cpp source node-llama-cpp ships (a git bundle). */
export function bundlePath() {
  return path.join(root, 'node_modules', 'node-llama-cpp', 'llama', 'gitRelease.bundle');
}

/** The directory under which each build lives (VIIWORK_ENGINE_CACHE overrides ~/.cache/viiwork/engine). */
export function cacheRoot(env = process.env) {
  if (env.VIIWORK_ENGINE_CACHE) return path.resolve(env.VIIWORK_ENGINE_CACHE);
  const base = env.XDG_CACHE_HOME ? path.resolve(env.XDG_CACHE_HOME) : path.join(os.homedir(), '.cache');
  return path.join(base, 'viiwork', 'engine');
}

// Hashing 35 MB costs about 0.1 s; memoised per process because every real-engine test file asks.
let memo;

/** The cache key of the current bundle, or undefined when the bundle is absent (node-llama-cpp not installed). */
export function cacheKey(bundle = bundlePath()) {
  if (memo && memo.bundle === bundle) return memo.key;
  let key;
  try {
    const hash = crypto.createHash('sha256').update(fs.readFileSync(bundle)).digest('hex');
    key = `${hash.slice(0, 16)}-r${RECIPE}`;
  } catch {
    key = undefined;
  }
  memo = { bundle, key };
  return key;
}

/** The build directory of the current bundle (it may not exist yet). */
export function buildDir(env = process.env) {
  const key = cacheKey();
  return key ? path.join(cacheRoot(env), key) : undefined;
}

/** The binaries a finished build holds; the build renames its directory into place only when both exist. */
export function enginePaths(dir) {
  return { llamaServer: path.join(dir, 'bin', 'llama-server'), rpcServer: path.join(dir, 'bin', 'ggml-rpc-server') };
}

/** The cached llama-server of the current bundle, or undefined when it has not been built. */
export function cachedLlamaServer(env = process.env) {
  const dir = buildDir(env);
  if (!dir) return undefined;
  const { llamaServer } = enginePaths(dir);
  return isExecutable(llamaServer) ? llamaServer : undefined;
}

export function isExecutable(file) {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return fs.statSync(file).isFile();
  } catch {
    return false;
  }
}
