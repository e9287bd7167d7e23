/**
 * Issue 45, the failure target: a lender killed mid-run (its node and its
 * ggml-rpc-server gone at once, as when its machine dies). The split model
 * stops cleanly: the request in flight ends (an error it can read, or its
 * answer; never a hang), the runner's llama-server and its own part are
 * gone and its memory is back in its budget, the feed says why; requests
 * meanwhile get a clear error; and once a member with room to lend joins,
 * the model is placed again and answers as before.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { ggufMemory } from '../../src/lifecycle/memory.ts';
import { waitFor } from '../fakes/wait.ts';
import { writeTinyGguf } from '../fakes/tiny-gguf.ts';
import { realLlamaServer } from '../helpers/engine.ts';
import { getJson, startMeshNode, waitConverged, type MeshNode } from '../helpers/mesh.ts';
import { tempDir } from '../helpers/node.ts';

const { binary: LLAMA, rpcServer, skip } = realLlamaServer();
const IP = (n: number) => `127.0.236.${n}`;

/** Every process below `pid` (children, their children, …). */
function descendants(pid: number): { pid: number; cmd: string }[] {
  const all: { pid: number; ppid: number; cmd: string }[] = [];
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
      all.push({ pid: Number(d), ppid: Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]), cmd: fs.readFileSync(`/proc/${d}/cmdline`, 'utf8').replace(/\0/g, ' ') });
    } catch {
      // gone meanwhile
    }
  }
  const out: { pid: number; cmd: string }[] = [];
  const walk = (p: number) => {
    for (const c of all.filter((x) => x.ppid === p)) {
      out.push({ pid: c.pid, cmd: c.cmd });
      walk(c.pid);
    }
  };
  walk(pid);
  return out;
}

async function chat(url: string, content: string, extra: Record<string, unknown> = {}): Promise<{ status: number; text: string }> {
  const r = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'big', messages: [{ role: 'user', content }], max_tokens: 12, temperature: 0, ...extra }),
    headersTimeout: 120_000,
    bodyTimeout: 120_000,
  });
  return { status: r.statusCode, text: await r.body.text() };
}

describe('a lender killed while a split model runs', { skip: skip || (!rpcServer && 'no ggml-rpc-server beside llama-server') }, () => {
  const dir = tempDir('split-lost-');
  const file = writeTinyGguf(path.join(dir, 'big.gguf'), { seed: 5, nLayers: 4, contextLength: 4096 });
  const nodes: MeshNode[] = [];
  let budget = 0;
  const entry = { name: 'big', engine: 'llamacpp', path: file, parallel: 1, context: 2048, cache_ram: 0, load: 'on_demand', idle_unload: '0', split: 'auto', workloads: ['chat', 'completion'], llamacpp: { binary: LLAMA, args: ['-t', '1'] } };
  const routing = { load_wait: '30s', queue_timeout: '10s' };

  before(async () => {
    budget = Math.floor((await ggufMemory(file, 2048)).total * 0.6);
    nodes.push(await startMeshNode({ name: 'runner', ip: IP(1), node: { memory_budget: budget, rpc_server: rpcServer }, models: [entry], routing }));
    nodes.push(await startMeshNode({ name: 'lender', ip: IP(2), seeds: [nodes[0].gossip], node: { memory_budget: budget, lend_memory: true, rpc_server: rpcServer }, routing }));
    await waitConverged(nodes);
  });
  after(async () => {
    await Promise.all(nodes.map((n) => n.stop()));
  });

  it('stops the model cleanly, ends the request in flight, and places the model again when room returns', async () => {
    const [runner, lender] = nodes;
    const first = await chat(runner.url, 'before');
    assert.equal(first.status, 200, first.text + runner.logs().slice(-2000));
    const answer = JSON.parse(first.text).choices[0].message.content;
    const kids = descendants(runner.proc.pid!);
    assert.ok(kids.some((k) => k.cmd.includes('llama-server') && k.cmd.includes('--rpc')), `the runner runs llama-server --rpc: ${JSON.stringify(kids)}`);

    // A long stream in flight when the lender dies.
    let received = '';
    const stream = (async () => {
      const r = await request(`${runner.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'big', messages: [{ role: 'user', content: 'a long one' }], max_tokens: 1800, temperature: 0, ignore_eos: true, stream: true }),
        headersTimeout: 60_000,
        bodyTimeout: 60_000,
      });
      for await (const chunk of r.body) received += chunk;
      return r.statusCode;
    })();
    await waitFor(() => received.includes('data: '), { timeoutMs: 60_000, what: 'the stream under way' });
    const lenderKids = descendants(lender.proc.pid!);
    assert.ok(lenderKids.some((k) => k.cmd.includes('ggml-rpc-server')), 'the lender runs ggml-rpc-server');
    // The machine dies: its node and everything it started, at once.
    lender.proc.kill('SIGKILL');
    for (const k of lenderKids) {
      try {
        process.kill(k.pid, 'SIGKILL');
      } catch {
        // gone with its node (setpriv --pdeathsig)
      }
    }
    const status = await stream;
    assert.equal(status, 200, 'the stream had started');
    const events = received.split('\n').filter((l) => l.startsWith('data: '));
    const last = events[events.length - 1];
    // It ends with an error event that says the engine failed (no other host holds the model to continue it): never a hang.
    assert.match(last, /"error":\{"message":"the engine failed mid-stream/, `the stream ends readably: ${received.slice(-400)}`);
    assert.ok(events.length < 1800, 'it did not run to its end');

    // The model stops cleanly: unloaded, its memory back, no engine or part left running.
    await waitFor(
      async () => {
        const t = (await getJson(`${runner.url}/v1/capacity`)).models.find((m: any) => m.name === 'big').targets[0];
        return t.state === 'unloaded' && t.split?.parts === undefined;
      },
      { timeoutMs: 30_000, intervalMs: 200, what: 'the split model stopped' },
    );
    const cap = await getJson(`${runner.url}/v1/capacity`);
    assert.equal(cap.memory.used, 0, 'its own part is back in its budget');
    await waitFor(() => descendants(runner.proc.pid!).every((k) => !/llama-server|ggml-rpc-server/.test(k.cmd)), { timeoutMs: 15_000, what: 'no engine or part left on the runner' });
    const feed = (await getJson(`${runner.url}/v1/decisions`)).data;
    assert.ok(
      feed.some((d: any) => d.model === 'big' && d.lifecycle?.event === 'unloading' && d.lifecycle.reason === 'lender'),
      `the feed says the model stopped for its lender: ${JSON.stringify(feed.filter((d: any) => d.lifecycle).map((d: any) => d.lifecycle))}`,
    );

    // No room anywhere: a request gets a clear error, not a hang.
    const meanwhile = await chat(runner.url, 'meanwhile');
    assert.equal(meanwhile.status, 503, meanwhile.text);
    assert.match(JSON.parse(meanwhile.text).error.message, /"big"/);
    assert.match(JSON.parse(meanwhile.text).error.message, /no member has room to load|loading model "big" failed/);

    // Room returns: a member that lends joins; the model is placed again and answers as before.
    nodes.push(await startMeshNode({ name: 'lender2', ip: IP(3), seeds: [runner.gossip], node: { memory_budget: budget, lend_memory: true, rpc_server: rpcServer }, routing }));
    await waitConverged([runner, nodes[2]]);
    const again = await waitFor(
      async () => {
        const r = await chat(runner.url, 'before');
        return r.status === 200 ? r : undefined;
      },
      { timeoutMs: 90_000, intervalMs: 500, what: 'the model placed again' },
    );
    assert.equal(JSON.parse(again.text).choices[0].message.content, answer, 'the same answer as before');
    const t = (await getJson(`${runner.url}/v1/capacity`)).models.find((m: any) => m.name === 'big').targets[0];
    assert.deepEqual(t.split.parts.map((p: any) => p.member), ['runner', 'lender2']);
  });
});
