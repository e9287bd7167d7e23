/**
 * The real llama-server a real-engine test runs, found in one place:
 * `VIIWORK_LLAMA_SERVER` when set, else the build `npm run engine` cached for
 * the llama.cpp source node-llama-cpp ships now (bin/engine-cache.mjs, the
 * same key the build script writes under). When there is none, a test skips
 * with a message naming the fix; under CI it fails instead, so a CI run
 * never passes by skipping the tests that matter most.
 */
import fs from 'node:fs';
import path from 'node:path';
// Plain JS shared with bin/engine.mjs (typed by engine-cache.d.mts): one cache key for the build and the tests.
import * as engineCache from '../../bin/engine-cache.mjs';

export interface RealEngine {
  /** Absolute path of llama-server (a placeholder when absent: the tests are skipped then). */
  binary: string;
  /** ggml-rpc-server beside it, when that exists. */
  rpcServer: string | undefined;
  /** false when present; otherwise the reason, for `describe(…, { skip })`. */
  skip: false | string;
}

/** CI=true (or any CI value but 0/false): a missing engine is a failure, not a skip. */
export function underCi(env: NodeJS.ProcessEnv = process.env): boolean {
  const v = env.CI?.trim().toLowerCase();
  return !!v && v !== '0' && v !== 'false';
}

/** Where the engine is, or why not; pure over `env`, so it is tested without a build. */
export function findLlamaServer(env: NodeJS.ProcessEnv = process.env): { binary?: string; missing?: string } {
  const named = env.VIIWORK_LLAMA_SERVER;
  if (named) {
    const binary = path.resolve(named);
    return engineCache.isExecutable(binary) ? { binary } : { missing: `VIIWORK_LLAMA_SERVER=${named} is not an executable file` };
  }
  const cached = engineCache.cachedLlamaServer(env);
  if (cached) return { binary: cached };
  const dir = engineCache.buildDir(env);
  return {
    missing: dir
      ? `no llama-server built for this llama.cpp source (looked in ${dir}): run \`npm run engine\` (needs cmake, g++ and git), or set VIIWORK_LLAMA_SERVER`
      : 'node-llama-cpp (and the llama.cpp source it ships) is not installed: run `npm ci`, then `npm run engine`; or set VIIWORK_LLAMA_SERVER',
  };
}

/**
 * The engine for a test file. Absent outside CI: `skip` carries the reason.
 * Absent under CI: throws, which fails the test file with that reason.
 */
export function realLlamaServer(env: NodeJS.ProcessEnv = process.env): RealEngine {
  const found = findLlamaServer(env);
  if (found.binary) {
    const rpc = path.join(path.dirname(found.binary), 'ggml-rpc-server');
    return { binary: found.binary, rpcServer: fs.existsSync(rpc) ? rpc : undefined, skip: false };
  }
  const reason = `the real llama-server is missing: ${found.missing}`;
  if (underCi(env)) throw new Error(`${reason} (CI=true: a real-engine test fails rather than skips)`);
  console.log(`# skipping real-engine tests: ${reason}`);
  return { binary: 'llama-server', rpcServer: undefined, skip: reason };
}
