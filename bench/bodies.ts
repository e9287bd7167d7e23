/**
 * `npm run bench -- bodies`: what hostile request bodies cost one node's
 * memory (issue 28). A real `viiwork serve` (one `openai` model, the
 * zero engine in a process of its own) gets, in turn:
 *
 *   big      rounds of 8 concurrent 30 MiB chat bodies (a JSON string of
 *            padding), each read, scanned and answered
 *   slow     4 client addresses × 40 sockets, each declaring a 30 MiB body
 *            and sending 1 KiB a second (api.max_open_bodies refuses the
 *            9th..40th of each address; api.body_timeout ends the rest)
 *   bombs    40 gzip bodies of ~64 KiB that inflate to 64 MiB (413 at
 *            api.max_body, the inflation stopped there)
 *
 * The node's resident memory (VmRSS from /proc) is sampled every 50 ms:
 * the idle baseline, the peak of each phase, what is left 15 s after it,
 * and at the end what is left after 500 small requests (which give V8
 * reason to collect: an idle node keeps garbage it has no need to free).
 * Numbers, not assertions: docs/reliability.md states the bound.
 */
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import zlib from 'node:zlib';
import { request } from 'undici';
import { machineInfo, rssMiB, scratchDir, sleep, startProc, stopAllProcs, until } from './lib/procs.ts';
import { startViiwork } from './lib/viiwork.ts';

const MIB = 1024 * 1024;
const IP = '127.0.93.1';
const PORT = 18093;
const BODY_TIMEOUT_S = 10;
const ENGINE_PORT = 18095;
const HERE = path.dirname(new URL(import.meta.url).pathname);

interface Phase {
  phase: string;
  requests: number;
  statuses: Record<string, number>;
  seconds: number;
  rss_before_mib: number;
  rss_peak_mib: number;
  rss_after_15s_mib: number;
}

export interface BodiesDoc {
  at: string;
  machine: Record<string, unknown>;
  config: Record<string, unknown>;
  rss_idle_mib: number;
  phases: Phase[];
  rss_after_small_requests_mib: number;
}

function rssMib(pid: number): number {
  const mib = rssMiB(pid);
  return mib === undefined ? NaN : Math.round(mib);
}

/** Samples the RSS every 50 ms until stopped; the peak seen. */
function sampler(pid: number) {
  let peak = rssMib(pid);
  const t = setInterval(() => (peak = Math.max(peak, rssMib(pid))), 50);
  return { stop: () => (clearInterval(t), peak) };
}

const count = (statuses: Record<string, number>, s: number | string) => void (statuses[String(s)] = (statuses[String(s)] ?? 0) + 1);

function bigBody(): Buffer {
  const head = Buffer.from('{"model":"demo","messages":[{"role":"user","content":"hi"}],"x":"');
  const tail = Buffer.from('"}');
  return Buffer.concat([head, Buffer.alloc(30 * MIB - head.length - tail.length, 0x61), tail]);
}

async function post(url: string, body: Buffer, headers: Record<string, string> = {}): Promise<number> {
  try {
    const r = await request(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
    await r.body.text();
    return r.statusCode;
  } catch {
    return 0;
  }
}

/** One socket declaring 30 MiB and sending 1 KiB a second; resolves with the status it was answered (0: none). */
function slowSocket(localAddress: string): Promise<number> {
  return new Promise((resolve) => {
    const sock = net.connect({ host: IP, port: PORT, localAddress });
    let got = '';
    let drip: NodeJS.Timeout | undefined;
    sock.on('data', (d) => (got += d.toString('latin1')));
    sock.on('error', () => {});
    sock.on('close', () => {
      clearInterval(drip);
      resolve(Number(/^HTTP\/1\.1 (\d{3})/.exec(got)?.[1] ?? 0));
    });
    sock.on('connect', () => {
      sock.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: ${IP}\r\nContent-Type: application/json\r\nContent-Length: ${30 * MIB}\r\n\r\n{"model":"demo","x":"`);
      const kib = Buffer.alloc(1024, 0x61);
      drip = setInterval(() => sock.writable && sock.write(kib), 1000);
    });
  });
}

async function phase(name: string, pid: number, run: () => Promise<number[]>): Promise<Phase> {
  const before = rssMib(pid);
  const s = sampler(pid);
  const t0 = performance.now();
  const statuses: Record<string, number> = {};
  const results = await run();
  for (const st of results) count(statuses, st);
  const seconds = (performance.now() - t0) / 1000;
  await sleep(15_000);
  const peak = s.stop();
  return { phase: name, requests: results.length, statuses, seconds: Math.round(seconds * 10) / 10, rss_before_mib: before, rss_peak_mib: peak, rss_after_15s_mib: rssMib(pid) };
}

export async function benchBodies(): Promise<BodiesDoc> {
  const dir = scratchDir('vw-bench-bodies-');
  const api = { max_body: '32MiB', body_timeout: `${BODY_TIMEOUT_S}s`, body_idle_timeout: '30s', max_open_bodies: 8 };
  try {
    startProc('engine', process.execPath, [path.join(HERE, 'fakes/zero-engine.mjs'), IP, String(ENGINE_PORT)], { dir });
    await until(async () => (await request(`http://${IP}:${ENGINE_PORT}/health`)).statusCode === 200, 'zero engine');
    const node = await startViiwork(
      {
        name: 'bodies',
        ip: IP,
        apiPort: PORT,
        gossipPort: PORT + 1,
        api,
        models: [{ name: 'demo', engine: 'openai', url: `http://${IP}:${ENGINE_PORT}`, parallel: 8 }],
      },
      dir,
    );
    const pid = node.proc.pid;
    await sleep(3000);
    const idle = rssMib(pid);
    const phases: Phase[] = [];
    const big = bigBody();
    phases.push(
      await phase('big: 5 rounds of 8 concurrent 30 MiB bodies', pid, async () => {
        const out: number[] = [];
        for (let round = 0; round < 5; round++) out.push(...(await Promise.all(Array.from({ length: 8 }, () => post(node.url, big)))));
        return out;
      }),
    );
    phases.push(
      await phase(`slow: 4 addresses × 40 sockets declaring 30 MiB, 1 KiB/s`, pid, () =>
        Promise.all(Array.from({ length: 160 }, (_, i) => slowSocket(`127.0.93.${10 + (i % 4)}`))),
      ),
    );
    const bomb = zlib.gzipSync(Buffer.alloc(64 * MIB, 0x20));
    phases.push(
      await phase(`bombs: 40 gzip bodies of ${Math.round(bomb.length / 1024)} KiB inflating to 64 MiB, 8 at a time`, pid, async () => {
        const out: number[] = [];
        for (let round = 0; round < 5; round++) out.push(...(await Promise.all(Array.from({ length: 8 }, () => post(node.url, bomb, { 'content-encoding': 'gzip' })))));
        return out;
      }),
    );
    const small = Buffer.from('{"model":"demo","messages":[{"role":"user","content":"hi"}]}');
    for (let i = 0; i < 50; i++) await Promise.all(Array.from({ length: 10 }, () => post(node.url, small)));
    await sleep(2000);
    return { at: new Date().toISOString(), machine: machineInfo(), config: api, rss_idle_mib: idle, phases, rss_after_small_requests_mib: rssMib(pid) };
  } finally {
    await stopAllProcs();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

export function printBodies(doc: BodiesDoc): void {
  console.log(`idle RSS ${doc.rss_idle_mib} MiB; api ${JSON.stringify(doc.config)}`);
  console.log(`after 500 small requests: RSS ${doc.rss_after_small_requests_mib} MiB`);
  console.table(doc.phases.map((p) => ({ phase: p.phase, requests: p.requests, statuses: JSON.stringify(p.statuses), s: p.seconds, 'rss before': p.rss_before_mib, 'rss peak': p.rss_peak_mib, 'rss 15 s after': p.rss_after_15s_mib })));
}
