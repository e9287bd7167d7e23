/**
 * Issue 45, the first target: a tiny model placed across two members because
 * neither budget holds it (real nodes as real processes, the real
 * llama-server and ggml-rpc-server), answering chat through either entry
 * node exactly as a single-host run of the same model answers (greedy,
 * same seed). The runner's report shows which member holds which part, the
 * lender's the memory it lends and to whom, the feed's load event the
 * parts; and a node without lend_memory is never asked to lend.
 */
import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import { promisify } from 'node:util';
import { chromium } from 'playwright-core';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { estimateMemory, ggufMemory } from '../../src/lifecycle/memory.ts';
import { waitFor } from '../fakes/wait.ts';
import { writeTinyGguf } from '../fakes/tiny-gguf.ts';
import { realLlamaServer } from '../helpers/engine.ts';
import { getJson, startMeshNode, waitConverged, type MeshNode } from '../helpers/mesh.ts';
import { tempDir } from '../helpers/node.ts';

const { binary: LLAMA, rpcServer, skip } = realLlamaServer();
const IP = (n: number) => `127.0.228.${n}`;
const MIB = 1024 * 1024;
const PROMPTS = ['hello there', 'the quick brown fox', 'split me across two hosts'];

async function chat(url: string, content: string): Promise<{ status: number; doc: any; node?: string }> {
  const r = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'big', messages: [{ role: 'user', content }], max_tokens: 12, temperature: 0, seed: 1 }),
    headersTimeout: 180_000,
    bodyTimeout: 180_000,
  });
  const text = await r.body.text();
  return { status: r.statusCode, doc: JSON.parse(text), node: r.headers['x-viiwork-node'] as string | undefined };
}

describe('a model bigger than each member, split across two', { skip: skip || (!rpcServer && 'no ggml-rpc-server beside llama-server') }, () => {
  const dir = tempDir('split-model-');
  const file = writeTinyGguf(path.join(dir, 'big.gguf'), { seed: 11, nLayers: 4 });
  const nodes: MeshNode[] = [];
  const reference: string[] = [];
  let need = 0;
  let single: ChildProcess | undefined;
  const entry = { name: 'big', engine: 'llamacpp', path: file, parallel: 1, context: 256, cache_ram: 0, load: 'on_demand', idle_unload: '0', split: 'auto', workloads: ['chat', 'completion'], llamacpp: { binary: LLAMA, args: ['-t', '1'] } };

  before(async () => {
    const est = await ggufMemory(file, 256);
    need = est.total;
    assert.equal(estimateMemory(est.weights, est.shape, 256).total, need);
    // The single-host answer: the same model and flags, in one llama-server.
    single = spawn(LLAMA, ['--model', file, '--host', '127.0.0.1', '--port', '0', '--parallel', '1', '--ctx-size', '256', '-t', '1', '--cache-ram', '0'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    single.stdout!.on('data', (d) => (out += d));
    single.stderr!.on('data', (d) => (out += d));
    const port = await waitFor(() => /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(out)?.[1], { timeoutMs: 60_000, what: 'the single-host llama-server listening' });
    await waitFor(async () => (await fetch(`http://127.0.0.1:${port}/health`)).ok, { timeoutMs: 60_000, what: 'the single-host llama-server loaded' });
    for (const p of PROMPTS) {
      const r = await chat(`http://127.0.0.1:${port}`, p);
      assert.equal(r.status, 200);
      reference.push(r.doc.choices[0].message.content);
    }
    single.kill('SIGKILL');
    // Budgets of 60% of the model each: neither holds it, the two together do. A third member does not lend.
    const budget = Math.floor(need * 0.6);
    nodes.push(await startMeshNode({ name: 'runner', ip: IP(1), node: { memory_budget: budget, rpc_server: rpcServer }, models: [entry], routing: { load_wait: '40s', queue_timeout: '40s' } }));
    nodes.push(await startMeshNode({ name: 'keeper', ip: IP(2), seeds: [nodes[0].gossip], node: { memory_budget: budget * 4, rpc_server: rpcServer }, routing: { load_wait: '40s', queue_timeout: '40s' } }));
    nodes.push(await startMeshNode({ name: 'lender', ip: IP(3), seeds: [nodes[0].gossip], node: { memory_budget: budget, lend_memory: true, rpc_server: rpcServer }, routing: { load_wait: '40s', queue_timeout: '40s' } }));
    await waitConverged(nodes);
  });
  after(async () => {
    single?.kill('SIGKILL');
    await Promise.all(nodes.map((n) => n.stop()));
  });

  it('is placed across the runner and the lender, answers through any entry node as one host does, and shows its parts', async () => {
    const [runner, keeper, lender] = nodes;
    // The keeper (no model, no lending) is an entry node: it places the model, the runner runs it with the lender's memory.
    const first = await chat(keeper.url, PROMPTS[0]);
    assert.equal(first.status, 200, JSON.stringify(first.doc) + nodes.map((n) => n.logs().slice(-2500)).join("\n----\n"));
    assert.equal(first.doc.choices[0].message.content, reference[0], 'the split model answers as the single host did');
    for (const [i, p] of PROMPTS.entries()) {
      for (const entryNode of [runner, keeper, lender]) {
        const r = await chat(entryNode.url, p);
        assert.equal(r.status, 200, JSON.stringify(r.doc));
        assert.equal(r.doc.choices[0].message.content, reference[i], `${p} through ${entryNode.name}`);
        assert.equal(r.node, 'runner');
      }
    }
    const cap = await getJson(`${runner.url}/v1/capacity`);
    const t = cap.models.find((m: any) => m.name === 'big').targets[0];
    assert.equal(t.state, 'loaded');
    assert.deepEqual(t.split.parts.map((p: any) => p.member), ['runner', 'lender']);
    assert.equal(t.split.parts.reduce((n: number, p: any) => n + p.bytes, 0), need, 'the parts add up to the model');
    assert.ok(cap.memory.used <= cap.memory.budget, `the runner within its budget: ${JSON.stringify(cap.memory)}`);
    // One target with its slots, its speed measured as any other's (it earns what it measures).
    const m = cap.models.find((x: any) => x.name === 'big');
    assert.equal(m.slots, 1);
    assert.ok(m.perf_samples > 0 && m.ttft_overhead_ms !== undefined, JSON.stringify(m));
    assert.equal(cap.memory.used, t.split.parts[0].bytes, 'the runner holds its own part');
    const lent = await getJson(`${lender.url}/v1/capacity`);
    assert.deepEqual(lent.lending.lends, [{ to: 'runner', model: 'big', bytes: t.split.parts[1].bytes }]);
    assert.ok(lent.memory.used <= lent.memory.budget);
    const kept = await getJson(`${keeper.url}/v1/capacity`);
    assert.equal(kept.lending, undefined);
    assert.equal(kept.memory.used, 0, 'the member without lend_memory lends nothing');
    const feed = (await getJson(`${runner.url}/v1/decisions`)).data;
    const loaded = feed.find((d: any) => d.model === 'big' && d.lifecycle?.event === 'loaded');
    assert.deepEqual(loaded.lifecycle.parts.map((p: any) => p.member), ['runner', 'lender']);
    assert.match(loaded.lifecycle.detail, /split across runner \(.*\), lender \(/);
    assert.ok(need > MIB);

    // viiwork status, through the entry node that holds nothing: which member holds which part, who lends what to whom.
    const { stdout } = await promisify(execFile)(process.execPath, [path.resolve('bin/viiwork.js'), 'status', '--url', keeper.url]);
    const row = stdout.split('\n').find((l) => /^big\s+runner\s/.test(l));
    assert.match(row ?? '', /loaded, split: runner \d+\.\d MiB \+ lender \d+\.\d MiB/, stdout);
    const lendRow = stdout.split('\n').find((l) => /^lender\s+\d/.test(l));
    assert.match(lendRow ?? '', /MiB to runner \(big\)/, stdout);
    assert.match(stdout.split('\n').find((l) => /^keeper\s+\d/.test(l)) ?? '', /\s-\s*$/, 'the keeper lends nothing');
    const json = JSON.parse((await promisify(execFile)(process.execPath, [path.resolve('bin/viiwork.js'), 'status', '--json', '--url', keeper.url])).stdout);
    assert.deepEqual(json.models.find((m: any) => m.name === 'big').hosts.find((h: any) => h.node === 'runner').split.map((p: any) => p.member), ['runner', 'lender']);
  });

  it('the dashboards show the parts, what the lender lends and to whom, and the load in the feed', { skip: fs.existsSync('/usr/bin/chromium') ? false : 'no /usr/bin/chromium' }, async () => {
    const [runner, keeper, lender] = nodes;
    const browser = await chromium.launch({
      executablePath: '/usr/bin/chromium',
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    try {
      const page = await browser.newPage();
      const errors: string[] = [];
      page.on('pageerror', (err) => errors.push(err.message));
      await page.goto(`${keeper.url}/`);
      await page.locator('[data-split="runner"]', { hasText: /split: runner \d+(\.\d)? MiB \+ lender \d+(\.\d)? MiB/ }).waitFor({ timeout: 10_000 });
      await page.locator('[data-lends="lender"]', { hasText: /lends \d+(\.\d)? MiB to runner \(big\)/ }).waitFor({ timeout: 10_000 });
      await page.goto(`${lender.url}/node`);
      await page.locator('#memory', { hasText: 'Lent' }).filter({ hasText: 'to runner (big)' }).waitFor({ timeout: 10_000 });
      await page.goto(`${runner.url}/node`);
      await page.locator('#models [data-split="big"]', { hasText: /split: runner .* \+ lender/ }).waitFor({ timeout: 10_000 });
      await page.goto(`${runner.url}/`);
      await page.locator('#feed', { hasText: /split across runner/ }).waitFor({ timeout: 10_000 });
      assert.deepEqual(errors, []);
    } finally {
      await browser.close();
    }
  });
});
