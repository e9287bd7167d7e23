// Types of bin/engine-cache.mjs (plain JS so `npm run engine` needs no loader), for the tests that import it.
export const RECIPE: number;
export function bundlePath(): string;
export function cacheRoot(env?: NodeJS.ProcessEnv): string;
export function cacheKey(bundle?: string): string | undefined;
export function buildDir(env?: NodeJS.ProcessEnv): string | undefined;
export function enginePaths(dir: string): { llamaServer: string; rpcServer: string };
export function cachedLlamaServer(env?: NodeJS.ProcessEnv): string | undefined;
export function isExecutable(file: string): boolean;
