/**
 * Proxy overhead: requests per second and latency percentiles straight to
 * an engine, and through one viiwork node in front of it, for whole JSON
 * answers and for streams. Bounded in count and time; loopback only.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Agent, request } from 'undici';
import { FAKE_LLAMA_SERVER } from '../test/fakes/fake-engine.ts';
import { waitFor } from '../test/fakes/wait.ts';

interface Result {
  name: string;
  requests: number;
  concurrency: number;
  seconds: number;
  rps: number;
  p50_ms: number;
  p99_ms: number;
}

function pct(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

async function load(name: string, url: string, body: string, total: number, concurrency: number): Promise<Result> {
  const agent = new Agent({ connections: concurrency, keepAliveTimeout: 10_000 });
  const lat: number[] = [];
  let next = 0;
  const started = performance.now();
  const deadline = started + 60_000;
  async function worker() {
    while (next < total && performance.now() < deadline) {
      next++;
      const t0 = performance.now();
      const res = await request(url, { method: 'POST', dispatcher: agent, headers: { 'content-type': 'application/json' }, body });
      await res.body.text();
      if (res.statusCode !== 200) throw new Error(`${name}: HTTP ${res.statusCode}`);
      lat.push(performance.now() - t0);
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker));
  const seconds = (performance.now() - started) / 1000;
  await agent.close();
  lat.sort((a, b) => a - b);
  return { name, requests: lat.length, concurrency, seconds: Number(seconds.toFixed(2)), rps: Math.round(lat.length / seconds), p50_ms: Number(pct(lat, 50).toFixed(2)), p99_ms: Number(pct(lat, 99).toFixed(2)) };
}

/** Each part in its own process, as in a deployment: the load generator here, the node and the engine beside it. */
export async function benchProxy(opts: { total?: number; concurrency?: number } = {}): Promise<Result[]> {
  const total = opts.total ?? 6000;
  const concurrency = opts.concurrency ?? 16;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'viiwork-bench-'));
  const enginePort = 18600;
  const nodePort = 18601;
  const children: ChildProcess[] = [];
  const engineUrl = `http://127.0.0.1:${enginePort}`;
  const nodeUrl = `http://127.0.0.1:${nodePort}`;
  children.push(spawn(process.execPath, [FAKE_LLAMA_SERVER, '--host', '127.0.0.1', '--port', String(enginePort), '--parallel', '256'], { stdio: 'ignore', env: { ...process.env, FAKE_LOAD_MS: '0', FAKE_OUTPUT_TOKENS: '4' } }));
  const cfg = path.join(dir, 'bench.yaml');
  fs.writeFileSync(
    cfg,
    `node: {name: bench, state_dir: ${dir}/state}\napi: {host: 127.0.0.1, port: ${nodePort}}\nmesh: {open: true, network: lan, mdns: false, advertise: 127.0.0.1, port: 18602}\nrouting: {queue_max: 1024}\nmodels:\n  - {name: m, engine: openai, url: "${engineUrl}", parallel: 256}\n`,
  );
  children.push(spawn(process.execPath, [path.resolve('bin/viiwork.js'), 'serve', '--config', cfg], { stdio: 'ignore' }));
  const chat = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hello' }] });
  const stream = JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: 'hello' }] });
  const results: Result[] = [];
  try {
    await waitFor(
      () =>
        request(`${nodeUrl}/v1/capacity`)
          .then((r) => r.body.json() as Promise<{ models: { healthy_backends: number }[] }>)
          .then((d) => d.models[0]?.healthy_backends === 1),
      { timeoutMs: 20_000, what: 'bench node and engine up' },
    );
    await load('warmup', `${nodeUrl}/v1/chat/completions`, chat, 1000, concurrency);
    results.push(await load('direct json', `${engineUrl}/v1/chat/completions`, chat, total, concurrency));
    results.push(await load('viiwork json', `${nodeUrl}/v1/chat/completions`, chat, total, concurrency));
    results.push(await load('direct stream', `${engineUrl}/v1/chat/completions`, stream, total, concurrency));
    results.push(await load('viiwork stream', `${nodeUrl}/v1/chat/completions`, stream, total, concurrency));
  } finally {
    for (const c of children) c.kill('SIGTERM');
  }
  return results;
}
