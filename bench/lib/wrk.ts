/**
 * wrk (the C load generator) with a Lua script that POSTs a fixed JSON body
 * and prints its summary as one JSON line at the end, so nothing is parsed
 * from wrk's human-readable table.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { TICK_MS } from './procs.ts';

export interface WrkResult {
  requests: number;
  seconds: number;
  rps: number;
  p50_ms: number;
  p90_ms: number;
  p99_ms: number;
  mean_ms: number;
  /** connect + read + write + timeout errors, and non-2xx/3xx answers */
  errors: number;
  non2xx: number;
  /** CPU ms used by wrk itself */
  wrk_cpu_ms?: number;
}

/** Write a Lua script that POSTs `body` as JSON, with `headers` too; returns its path. */
export function postScript(dir: string, name: string, body: string, headers: Record<string, string> = {}): string {
  const file = path.join(dir, `${name.replace(/[^A-Za-z0-9._-]/g, '_')}.lua`);
  const extra = Object.entries(headers)
    .map(([k, v]) => `wrk.headers[${JSON.stringify(k)}] = ${JSON.stringify(v)}\n`)
    .join('');
  // A Lua long string keeps the JSON byte for byte (it has no "]==]").
  fs.writeFileSync(
    file,
    `wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
${extra}wrk.body = [==[${body}]==]
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('WRKJSON {"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d,"p50":%d,"p90":%d,"p99":%d,"mean":%.1f}\\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.mean))
end
`,
  );
  return file;
}

/** One wrk run; bounded by `seconds` (+ a hard kill 30 s later). */
export function runWrk(opts: { url: string; script: string; connections: number; seconds: number; threads?: number }): Promise<WrkResult> {
  const args = ['-t', String(opts.threads ?? 1), '-c', String(opts.connections), '-d', `${opts.seconds}s`, '--timeout', '10s', '--latency', '-s', opts.script, opts.url];
  return new Promise((resolve, reject) => {
    const child = spawn('wrk', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    const kill = setTimeout(() => child.kill('SIGKILL'), (opts.seconds + 30) * 1000);
    let cpu = 0;
    const readCpu = () => {
      try {
        const s = fs.readFileSync(`/proc/${child.pid}/stat`, 'utf8');
        const rest = s.slice(s.lastIndexOf(')') + 2).split(' ');
        cpu = (Number(rest[11]) + Number(rest[12])) * TICK_MS;
      } catch {
        // gone
      }
    };
    // wrk's own CPU: sampled just before it exits (it prints its summary last).
    const sampler = setInterval(readCpu, 200);
    child.on('error', (err) => {
      clearTimeout(kill);
      clearInterval(sampler);
      reject(err);
    });
    child.on('exit', () => {
      clearTimeout(kill);
      clearInterval(sampler);
      const line = out.split('\n').find((l) => l.startsWith('WRKJSON '));
      if (!line) return reject(new Error(`wrk printed no summary:\n${out.slice(-2000)}`));
      const j = JSON.parse(line.slice(8));
      const seconds = j.duration_us / 1e6;
      resolve({
        requests: j.requests,
        seconds: Number(seconds.toFixed(2)),
        rps: Math.round(j.requests / seconds),
        p50_ms: j.p50 / 1000,
        p90_ms: j.p90 / 1000,
        p99_ms: j.p99 / 1000,
        mean_ms: Number((j.mean / 1000).toFixed(3)),
        errors: j.connect + j.read + j.write + j.timeout,
        non2xx: j.status,
        wrk_cpu_ms: cpu,
      });
    });
  });
}
