/**
 * The Portkey AI gateway (`@portkey-ai/gateway`, pinned below) as an
 * overhead arm. It is not one of the project's dependencies (it brings
 * hundreds of packages): the benchmark installs it from npm into a cache
 * directory of its own the first time the arm runs. The arm is provider `openai` with the engine as its custom host,
 * started through bench/fakes/portkey-gateway.mjs so it listens on one
 * loopback address. Before it is loaded, one JSON and one streamed request
 * show whether each works on this Node; a failure is the skip reason.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { request } from 'undici';
import { startProc, untilListening, type Proc } from './procs.ts';

const HERE = path.dirname(new URL(import.meta.url).pathname);
export const PORTKEY_VERSION = '1.15.2';
const CACHE = path.join(os.tmpdir(), `viiwork-bench-portkey-${PORTKEY_VERSION}`);
export const PORTKEY_ENTRY = path.join(CACHE, 'node_modules/@portkey-ai/gateway/build/start-server.js');

/** The headers every request through Portkey carries: which provider, and where it is. */
export function portkeyHeaders(engine: string): Record<string, string> {
  return { 'x-portkey-provider': 'openai', 'x-portkey-custom-host': `http://${engine}/v1`, authorization: 'Bearer bench' };
}

/** Install the gateway into the benchmark's cache when it is not there; the reason it cannot be, else undefined. */
export function ensurePortkey(): string | undefined {
  if (fs.existsSync(PORTKEY_ENTRY)) return undefined;
  try {
    fs.mkdirSync(CACHE, { recursive: true });
    execFileSync('npm', ['install', '--no-save', '--no-audit', '--no-fund', '--prefix', CACHE, `@portkey-ai/gateway@${PORTKEY_VERSION}`], { stdio: 'pipe', timeout: 300_000 });
  } catch (err) {
    return `npm install @portkey-ai/gateway@${PORTKEY_VERSION} failed: ${String((err as { stderr?: Buffer }).stderr ?? (err as Error).message).slice(0, 300)}`;
  }
  return fs.existsSync(PORTKEY_ENTRY) ? undefined : `@portkey-ai/gateway@${PORTKEY_VERSION} installed without ${PORTKEY_ENTRY}`;
}

export async function startPortkey(name: string, o: { dir: string; listen: string; engine: string }): Promise<Proc> {
  const [host, port] = o.listen.split(':');
  const env = { ...process.env, TRUSTED_CUSTOM_HOSTS: o.engine.split(':')[0], NODE_ENV: 'production' };
  const p = startProc(name, process.execPath, [path.join(HERE, '../fakes/portkey-gateway.mjs'), host, port, PORTKEY_ENTRY], { dir: o.dir, env });
  await untilListening(p, o.listen, name, 20_000);
  return p;
}

/**
 * One request of each kind through the gateway: undefined when it answered
 * as the engine does (a JSON completion; an SSE stream ending in [DONE]),
 * else what went wrong, with the gateway's own log line when it wrote one.
 */
export async function probePortkey(url: string, headers: Record<string, string>, body: string, proc: Proc): Promise<string | undefined> {
  const before = proc.tail(100_000).length;
  try {
    const r = await request(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body, signal: AbortSignal.timeout(10_000) });
    const text = await r.body.text();
    const stream = body.includes('"stream":true');
    const good = r.statusCode === 200 && (stream ? text.includes('[DONE]') && text.includes('"content"') : text.includes('"choices"'));
    if (good) return undefined;
    await new Promise((res) => setTimeout(res, 200));
    const log = proc
      .tail(100_000)
      .slice(before)
      .split('\n')
      .filter((l) => /error|Error/.test(l))
      .slice(0, 3)
      .join(' | ');
    return `HTTP ${r.statusCode}: ${text.slice(0, 200)}${log ? `; gateway log: ${log.slice(0, 600)}` : ''}`;
  } catch (err) {
    return `no answer: ${(err as Error).message}`;
  }
}
