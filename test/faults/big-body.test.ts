/**
 * Issue 9, acceptance 2: a 30 MiB chat or embeddings body of any shape
 * stalls no node's event loop for 200 ms or more — the entry scans, hashes
 * and signs it, the executor verifies and scans it and runs it locally —
 * and no peer ever suspects a node while it handles one.
 *
 * The stall is read from the node itself: `viiwork_event_loop_delay_max_seconds`
 * in /metrics is the longest event-loop delay since the previous scrape. On
 * a loaded 2-core machine every process sees scheduling delays of its own,
 * so the nodes a request does not touch are the control: a node's stall is
 * what it saw beyond the longest delay they saw over the same request.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { spawn, type ChildProcess } from 'node:child_process';
import { request } from 'undici';
import { FAKE_LLAMA_SERVER } from '../fakes/fake-engine.ts';
import { waitFor } from '../fakes/wait.ts';
import { getJson, startMeshNode, stopAll, waitConverged, waitModelOn, type MeshNode } from '../helpers/mesh.ts';

const IP = (n: number) => `127.0.32.${n}`;
const MiB = 1024 * 1024;
const STALL_BOUND_S = 0.2;

/** The longest event-loop delay a node saw since the previous call (the first call only resets). */
async function loopStall(node: MeshNode): Promise<number> {
  const text = await (await request(`${node.url}/metrics`)).body.text();
  const m = /^viiwork_event_loop_delay_max_seconds (\S+)$/m.exec(text);
  assert.ok(m, `no event-loop metric in /metrics of ${node.name}`);
  return Number(m[1]);
}

/** ~`bytes` of JSON of several shapes, each a valid request for `model`. */
function shapes(model: string, bytes: number): { kind: string; path: string; body: Buffer }[] {
  const msg = '[{"role":"user","content":"hi"}]';
  const fill = (unit: string, head: string, tail: string) => {
    const n = Math.floor((bytes - head.length - tail.length) / unit.length);
    return Buffer.from(`${head}${unit.repeat(n - 1)}${unit.replace(/,$/, '')}${tail}`);
  };
  const depth = 60;
  return [
    { kind: 'chat, an array of empty objects', path: '/v1/chat/completions', body: fill('{},', `{"model":"${model}","messages":${msg},"pad":[`, ']}') },
    { kind: 'chat, one escaped string', path: '/v1/chat/completions', body: fill('a\\"\\u00e9\\n', `{"model":"${model}","messages":[{"role":"user","content":"`, '"}]}') },
    { kind: 'chat, streamed, many messages', path: '/v1/chat/completions', body: fill('{"role":"user","content":"x"},', `{"model":"${model}","stream":true,"messages":[`, ']}') },
    { kind: 'chat, nesting near the depth bound', path: '/v1/chat/completions', body: fill(`${'['.repeat(depth)}${']'.repeat(depth)},`, `{"model":"${model}","messages":${msg},"deep":[`, ']}') },
    { kind: 'embeddings, thousands of strings', path: '/v1/embeddings', body: fill(`"${'ab '.repeat(3000)}",`, `{"model":"${model}","input":[`, ']}') },
  ];
}

/**
 * An engine in its own process: parsing 30 MiB of JSON takes it seconds,
 * which must not stall the test's own watchers (nor the nodes' health probes).
 */
async function engineProcess(ip: string): Promise<{ url: string; proc: ChildProcess }> {
  const proc = spawn(process.execPath, [FAKE_LLAMA_SERVER, '--host', ip, '--port', '8080', '--parallel', '2'], {
    env: { ...process.env, FAKE_LOAD_MS: '0', FAKE_OUTPUT_TOKENS: '2', FAKE_KEEP_REQUESTS: '0' },
    stdio: 'ignore',
  });
  const url = `http://${ip}:8080`;
  await waitFor(async () => (await request(`${url}/health`)).statusCode === 200, { timeoutMs: 15_000, what: `fake engine on ${ip}` });
  return { url, proc };
}

describe('30 MiB bodies: no stall, no suspicion', () => {
  let engB: { url: string; proc: ChildProcess };
  let engC: { url: string; proc: ChildProcess };
  let a: MeshNode, b: MeshNode, c: MeshNode, d: MeshNode;
  before(async () => {
    const env = { VIIWORK_MESH_SECRET: crypto.randomBytes(32).toString('base64') };
    engB = await engineProcess(IP(12));
    engC = await engineProcess(IP(13));
    const model = (url: string) => ({ name: 'big', engine: 'openai', url, parallel: 2, workloads: ['chat', 'embeddings'] });
    // A is a gateway: every request entering it is hashed, signed and forwarded.
    a = await startMeshNode({ name: 'A', ip: IP(1), env });
    b = await startMeshNode({ name: 'B', ip: IP(2), env, seeds: [a.gossip], models: [model(engB.url)] });
    c = await startMeshNode({ name: 'C', ip: IP(3), env, seeds: [a.gossip], models: [model(engC.url)] });
    d = await startMeshNode({ name: 'D', ip: IP(4), env, seeds: [a.gossip] });
    await waitConverged([a, b, c, d]);
    await waitModelOn(a, 'big', ['B', 'C']);
  });
  after(async () => {
    await stopAll([a, b, c, d]);
    engB?.proc.kill();
    engC?.proc.kill();
  });

  it('every shape is answered; neither the entry (scan, hash, sign) nor the executor (verify, scan, run) stalls 200 ms; no peer suspects anyone', async () => {
    const nodes = [a, b, c, d];
    // Every node's view of every other, sampled throughout: any state but alive is a suspicion.
    const suspicions: string[] = [];
    let watching = true;
    const watch = (async () => {
      while (watching) {
        for (const viewer of nodes) {
          const mesh = await getJson<{ members: { name: string; state: string }[] }>(`${viewer.url}/v1/mesh`).catch(() => undefined);
          for (const m of mesh?.members ?? []) if (m.state !== 'alive') suspicions.push(`${viewer.name} saw ${m.name} ${m.state}`);
        }
        await new Promise((r) => setTimeout(r, 100));
      }
    })();

    try {
      for (const s of shapes('big', 30 * MiB)) {
        assert.ok(s.body.length > 29 * MiB && s.body.length < 32 * MiB, `${s.kind}: ${s.body.length} bytes`);
        // A stall the product causes (one synchronous pass over the body) shows on every try; one the scheduler
        // causes on a loaded machine (two CPU burners beside the suite) comes and goes: up to three tries, the least.
        const excess = new Map<string, number[]>();
        for (let attempt = 0; attempt < 3; attempt++) {
          for (const n of nodes) await loopStall(n);
          const r = await request(`${a.url}${s.path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: s.body });
          const text = await r.body.text();
          assert.equal(r.statusCode, 200, `${s.kind}: ${r.statusCode} ${text.slice(0, 300)}`);
          const executor = r.headers['x-viiwork-node'] === 'B' ? b : r.headers['x-viiwork-node'] === 'C' ? c : undefined;
          assert.ok(executor, `${s.kind} ran on ${String(r.headers['x-viiwork-node'])}`);
          const stalls = new Map<MeshNode, number>();
          for (const n of nodes) stalls.set(n, await loopStall(n));
          // The nodes that did nothing for this request measure the machine: the longest delay any of them saw.
          const machine = Math.max(...nodes.filter((n) => n !== a && n !== executor).map((n) => stalls.get(n)!));
          let over = false;
          for (const [role, n] of [['entry', a], ['executor', executor]] as const) {
            const own = stalls.get(n)!;
            if (process.env.SHOW_STALLS) console.log(`${s.kind}: ${n.name} ${(own * 1000).toFixed(0)} ms, idle nodes up to ${(machine * 1000).toFixed(0)} ms`);
            const list = excess.get(role) ?? [];
            excess.set(role, [...list, own - machine]);
            if (own - machine >= STALL_BOUND_S) over = true;
          }
          if (!over) break;
        }
        for (const [role, list] of excess) {
          const least = Math.min(...list);
          assert.ok(least < STALL_BOUND_S, `${s.kind}: the ${role}'s event loop stalled beyond the idle nodes' by ${list.map((x) => `${(x * 1000).toFixed(0)} ms`).join(', ')} (every try)`);
        }
      }
    } finally {
      watching = false;
      await watch;
    }
    assert.deepEqual(suspicions, []);
  });
});
