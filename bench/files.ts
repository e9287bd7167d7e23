/**
 * Issue 20 acceptance: a 2 GiB model file moves between two members at
 * ≥ 80% of the rate curl gets downloading it from nginx on the same
 * loopback, hash included, with both sides' event-loop delay under 50 ms.
 *
 *   nginx    nginx (one worker, sendfile) serves the file; curl writes it to disk
 *   viiwork  a real node (`viiwork serve`, secured mesh, 127.0.143.1) serves
 *            it at GET /v1/files/{sha256}; this process fetches it with
 *            src/files/fetch.ts (the node's fetcher: signed request, written
 *            to a temporary file, SHA-256 over every byte, renamed)
 *
 * The sender's event-loop delay comes from bench/fakes/eld-hook.mjs (100 ms
 * windows); this process's from monitorEventLoopDelay. Rounds alternate the
 * arms. Env: FILES_BYTES (2 GiB), FILES_ROUNDS (2). Writes bench/results/files.json.
 */
import { execFileSync, spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { fetchFile } from '../src/files/fetch.ts';
import { EMPTY_BODY_SHA256, RequestSigner } from '../src/security/signing.ts';
import { startMeshNode, stopAll, waitConverged, getJson } from '../test/helpers/mesh.ts';
import { waitFor } from '../test/fakes/wait.ts';
import { FAKE_LLAMA_SERVER } from '../test/fakes/fake-engine.ts';

const BYTES = Number(process.env.FILES_BYTES ?? 2 * 1024 ** 3);
const ROUNDS = Number(process.env.FILES_ROUNDS ?? 2);
const IP = (n: number) => `127.0.143.${n}`;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vw-bench-files-'));
const file = path.join(dir, 'big.gguf');

// Random bytes (not a sparse file: zeros would flatter whoever reads them), with the GGUF magic.
{
  const fd = fs.openSync(file, 'w');
  const block = crypto.randomBytes(16 * 1024 * 1024);
  block.write('GGUF', 0);
  for (let at = 0; at < BYTES; at += block.length) fs.writeSync(fd, block, 0, Math.min(block.length, BYTES - at), at);
  fs.closeSync(fd);
}
const sha = execFileSync('sha256sum', [file]).toString().split(' ')[0];

const nginxConf = path.join(dir, 'nginx.conf');
fs.writeFileSync(
  nginxConf,
  `worker_processes 1; daemon off; user root; pid ${dir}/nginx.pid; error_log ${dir}/nginx.err;
events { worker_connections 64; }
http { access_log off; sendfile on; tcp_nopush on;
  client_body_temp_path ${dir}/t1; proxy_temp_path ${dir}/t2; fastcgi_temp_path ${dir}/t3; uwsgi_temp_path ${dir}/t4; scgi_temp_path ${dir}/t5;
  server { listen ${IP(9)}:8099; root ${dir}; } }`,
);
const nginx = spawn('nginx', ['-c', nginxConf, '-p', dir], { stdio: 'ignore' });

const secret = crypto.randomBytes(32);
const eldFile = path.join(dir, 'sender-eld.txt');
const env = { VIIWORK_MESH_SECRET: secret.toString('base64') };
const entry = { name: 'big', engine: 'llamacpp', path: file, load: 'on_demand', memory: '1GiB', llamacpp: { binary: FAKE_LLAMA_SERVER } };
const a = await startMeshNode({ name: 'bf-a', ip: IP(1), env: { ...env, NODE_OPTIONS: `--import=${path.resolve('bench/fakes/eld-hook.mjs')}`, VW_ELD_FILE: eldFile }, models: [entry] });
const b = await startMeshNode({ name: 'bf-b', ip: IP(2), env, seeds: [a.gossip] });
await waitConverged([a, b]);
await waitFor(async () => (await getJson(`${a.url}/v1/capacity`)).models[0]?.file?.sha256 === sha, { timeoutMs: 300_000, intervalMs: 500, what: 'sender hashed the file' });
const signer = new RequestSigner(secret);

function curlArm(): number {
  const out = path.join(dir, 'curl.out');
  const t = performance.now();
  execFileSync('curl', ['-sf', '-o', out, `http://${IP(9)}:8099/big.gguf`]);
  // Hash included on both arms: curl's bytes are hashed as the fetcher hashes its own.
  const got = execFileSync('sha256sum', [out]).toString().split(' ')[0];
  const ms = performance.now() - t;
  if (got !== sha) throw new Error('curl got other bytes');
  fs.rmSync(out);
  return ms;
}

/** The event-loop delay max of this process and of the sender over `ms` with no transfer: what the machine alone costs. */
async function idleBaseline(ms: number): Promise<{ receiverMax: number; senderMax: number }> {
  const h = monitorEventLoopDelay({ resolution: 5 });
  const t0 = Date.now();
  h.enable();
  await new Promise((res) => setTimeout(res, ms));
  h.disable();
  await new Promise((res) => setTimeout(res, 250));
  const windows = fs.readFileSync(eldFile, 'utf8').trim().split('\n').map((l) => l.split(' ').map(Number)).filter(([at]) => at >= t0 && at <= t0 + ms);
  return { receiverMax: h.max / 1e6, senderMax: Math.max(...windows.map((w) => w[1])) };
}

async function viiworkArm(): Promise<{ ms: number; receiverMax: number; senderMax: number }> {
  const models = path.join(dir, 'models');
  fs.rmSync(models, { recursive: true, force: true });
  const h = monitorEventLoopDelay({ resolution: 5 });
  const t0 = Date.now();
  h.enable();
  const t = performance.now();
  const r = await fetchFile({
    sha256: sha,
    size: BYTES,
    dest: path.join(models, 'big.gguf'),
    modelsDir: models,
    sources: [{ name: 'bf-a', api: a.url }],
    headers: (s, p) => ({ ...signer.sign({ method: 'GET', pathWithQuery: p, node: 'bf-b', to: s.name, bodySha256: EMPTY_BODY_SHA256 }) }),
    reserve: 0,
  });
  const ms = performance.now() - t;
  h.disable();
  const t1 = Date.now();
  if (r.sha256 !== sha) throw new Error('fetched other bytes');
  await new Promise((res) => setTimeout(res, 250));
  const windows = fs
    .readFileSync(eldFile, 'utf8')
    .trim()
    .split('\n')
    .map((l) => l.split(' ').map(Number))
    .filter(([at]) => at >= t0 && at <= t1 + 100);
  return { ms, receiverMax: h.max / 1e6, senderMax: Math.max(...windows.map((w) => w[1])) };
}

const rows: Record<string, unknown>[] = [];
try {
  curlArm(); // warm the page cache for both arms
  for (let i = 0; i < ROUNDS; i++) {
    const idle = await idleBaseline(5000);
    const c = curlArm();
    const v = await viiworkArm();
    const row = {
      round: i + 1,
      curl_ms: Math.round(c),
      curl_mib_s: Math.round(BYTES / 1024 ** 2 / (c / 1000)),
      viiwork_ms: Math.round(v.ms),
      viiwork_mib_s: Math.round(BYTES / 1024 ** 2 / (v.ms / 1000)),
      ratio: Number((c / v.ms).toFixed(3)),
      receiver_loop_max_ms: Number(v.receiverMax.toFixed(1)),
      sender_loop_max_ms: v.senderMax,
      idle_receiver_loop_max_ms: Number(idle.receiverMax.toFixed(1)),
      idle_sender_loop_max_ms: idle.senderMax,
    };
    rows.push(row);
    console.log(JSON.stringify(row));
  }
  fs.mkdirSync('bench/results', { recursive: true });
  fs.writeFileSync('bench/results/files.json', JSON.stringify({ bytes: BYTES, cpus: os.cpus().length, load: os.loadavg(), rows }, null, 2) + '\n');
} finally {
  nginx.kill('SIGTERM');
  await stopAll([a, b]);
  fs.rmSync(dir, { recursive: true, force: true });
}
