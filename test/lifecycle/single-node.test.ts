/**
 * One node, on-demand sim models on a budget for one (SPEC section 11): a
 * request loads its model, the least recently used idle model is unloaded to
 * make room, idle models unload after idle_unload, and a model with a request
 * in flight is never unloaded.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { startNode, type TestNode } from '../helpers/node.ts';
import { waitFor } from '../fakes/wait.ts';

const GIB = 1024 ** 3;

function simModel(name: string, extra: Record<string, unknown> = {}) {
  return { name, engine: 'sim', parallel: 2, load: 'on_demand', memory: '1GiB', idle_unload: '0', sim: { ttft_ms: 5, tokens_per_s: 1000, output_tokens: 4, load_ms: 400 }, ...extra };
}

async function chat(url: string, model: string, extra: Record<string, unknown> = {}): Promise<{ status: number; body: any; ms: number; headers: Headers }> {
  const t0 = performance.now();
  const r = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], ...extra }),
  });
  const text = await r.text();
  return { status: r.status, body: text.startsWith('{') ? JSON.parse(text) : text, ms: performance.now() - t0, headers: r.headers };
}

async function capacity(url: string): Promise<any> {
  return (await fetch(`${url}/v1/capacity`)).json();
}

function stateOf(cap: any, model: string): string | undefined {
  return cap.models.find((m: any) => m.name === model)?.targets[0]?.state;
}

describe('on-demand models on one node', () => {
  const nodes: TestNode[] = [];
  after(async () => {
    for (const n of nodes) await n.stop();
  });

  it('an unloaded model is available (0 slots, listed), a request loads it, LRU unloads the idle one for room', async () => {
    const n = await startNode({ node: { name: 'od1', memory_budget: '1.5GiB' }, models: [simModel('a'), simModel('b')] });
    nodes.push(n);
    let cap = await capacity(n.url);
    assert.deepEqual(cap.memory, { budget: 1.5 * GIB, used: 0, free: 1.5 * GIB });
    assert.equal(stateOf(cap, 'a'), 'unloaded');
    assert.equal(cap.models.find((m: any) => m.name === 'a').targets[0].slots, 0);
    assert.equal(cap.models.find((m: any) => m.name === 'a').targets[0].memory, GIB);
    const models = (await (await fetch(`${n.url}/v1/models`)).json()) as any;
    assert.deepEqual(models.data.map((m: any) => m.id).sort(), ['a', 'b']);
    // What the dashboards draw: each host's memory and each model's state there.
    const fleet = (await (await fetch(`${n.url}/v1/fleet/capacity`)).json()) as any;
    assert.deepEqual(fleet.memory, [{ node: 'od1', budget: 1.5 * GIB, used: 0, free: 1.5 * GIB }]);
    const fa = fleet.models.find((m: any) => m.name === 'a').hosts[0];
    assert.equal(fa.state, 'unloaded');
    assert.equal(fa.targets[0].on_demand, true);
    assert.equal(fa.targets[0].memory, GIB);

    const first = await chat(n.url, 'a');
    assert.equal(first.status, 200, JSON.stringify(first.body));
    assert.ok(first.ms >= 400, `answered after the simulated load (${first.ms} ms)`);
    cap = await capacity(n.url);
    assert.equal(stateOf(cap, 'a'), 'loaded');
    assert.equal(cap.memory.used, GIB);

    const second = await chat(n.url, 'b');
    assert.equal(second.status, 200, JSON.stringify(second.body));
    cap = await capacity(n.url);
    assert.equal(stateOf(cap, 'b'), 'loaded');
    assert.equal(stateOf(cap, 'a'), 'unloaded');
    assert.equal(cap.memory.used, GIB);

    const feed = ((await (await fetch(`${n.url}/v1/decisions`)).json()) as any).data;
    const loads = feed.filter((d: any) => d.lifecycle);
    assert.ok(loads.some((d: any) => d.model === 'b' && d.lifecycle.event === 'loading' && /unloading a for room/.test(d.lifecycle.detail)), JSON.stringify(loads));
    assert.ok(loads.some((d: any) => d.model === 'a' && d.lifecycle.event === 'unloading' && d.lifecycle.reason === 'room' && /room for b/.test(d.lifecycle.detail)));
    const metrics = await (await fetch(`${n.url}/metrics`)).text();
    assert.match(metrics, /viiwork_model_loads_total\{model="a",reason="request"\} 1/);
    assert.match(metrics, /viiwork_model_unloads_total\{model="a",reason="room"\} 1/);
    assert.match(metrics, /viiwork_memory_bytes\{kind="budget"\} 1610612736/);
    assert.ok(n.logs.some((l) => /unloading a \(room\): room for b/.test(l)), 'the log says why');
  });

  it('a model with a request in flight is never unloaded: the other waits, then loads when it is idle', async () => {
    const n = await startNode({
      node: { name: 'od2', memory_budget: '1.5GiB' },
      routing: { queue_timeout: '20s' },
      models: [simModel('a', { sim: { ttft_ms: 5, tokens_per_s: 20, output_tokens: 40, load_ms: 100 } }), simModel('b', { sim: { ttft_ms: 5, tokens_per_s: 1000, output_tokens: 4, load_ms: 100 } })],
    });
    nodes.push(n);
    // A long stream on a (about 2 s).
    const long = chat(n.url, 'a', { stream: true });
    await waitFor(async () => (await capacity(n.url)).models.find((m: any) => m.name === 'a').busy === 1, { timeoutMs: 10_000, intervalMs: 50 });
    const t0 = performance.now();
    const b = chat(n.url, 'b');
    // While a streams, b is refused room (a is busy), and a stays loaded.
    const samples: string[] = [];
    while (!(await Promise.race([long.then(() => true), new Promise((r) => setTimeout(() => r(false), 100))]))) samples.push(stateOf(await capacity(n.url), 'a')!);
    const l = await long;
    assert.equal(l.status, 200);
    assert.match(String(l.body), /\[DONE\]/, 'the stream ran to its end');
    assert.ok(samples.length > 5 && samples.every((s) => s === 'loaded'), samples.join(','));
    const rb = await b;
    assert.equal(rb.status, 200, JSON.stringify(rb.body));
    assert.ok(performance.now() - t0 >= 1000, 'b waited for a to go idle');
    const cap = await capacity(n.url);
    assert.equal(stateOf(cap, 'b'), 'loaded');
    assert.equal(stateOf(cap, 'a'), 'unloaded');
  });

  it('idle_unload stops an idle model and returns its memory', async () => {
    const n = await startNode({ node: { name: 'od3', memory_budget: '4GiB' }, models: [simModel('a', { idle_unload: '1s' })] });
    nodes.push(n);
    assert.equal((await chat(n.url, 'a')).status, 200);
    assert.equal(stateOf(await capacity(n.url), 'a'), 'loaded');
    const t0 = performance.now();
    await waitFor(async () => stateOf(await capacity(n.url), 'a') === 'unloaded', { timeoutMs: 10_000, intervalMs: 50 });
    assert.ok(performance.now() - t0 >= 500, 'not before idle_unload');
    assert.equal((await capacity(n.url)).memory.used, 0);
    const metrics = await (await fetch(`${n.url}/metrics`)).text();
    assert.match(metrics, /viiwork_model_unloads_total\{model="a",reason="idle"\} 1/);
    // And it loads again on the next request.
    assert.equal((await chat(n.url, 'a')).status, 200);
  });

  it('operators load and unload from loopback; a model that cannot fit is refused, marked memory', async () => {
    const n = await startNode({ node: { name: 'od4', memory_budget: '1.5GiB' }, routing: { queue_timeout: '1s' }, models: [simModel('a'), simModel('big', { memory: '2GiB' }), { name: 'pinned', engine: 'sim', parallel: 1 }] });
    nodes.push(n);
    const post = (p: string) => fetch(`${n.url}${p}`, { method: 'POST' });
    let r = await post('/v1/models/a/load');
    assert.equal(r.status, 202);
    assert.equal(((await r.json()) as any).state, 'loading');
    assert.equal((await post('/v1/models/a/load')).status, 202, 'a second ask joins the same load');
    await waitFor(async () => stateOf(await capacity(n.url), 'a') === 'loaded', { timeoutMs: 10_000, intervalMs: 50 });
    assert.equal((await post('/v1/models/a/load')).status, 200);
    r = await post('/v1/models/big/load');
    assert.equal(r.status, 503);
    assert.equal(r.headers.get('x-viiwork-refused'), 'memory');
    assert.match(((await r.json()) as any).error.message, /needs 2\.0 GiB/);
    assert.equal((await post('/v1/models/pinned/unload')).status, 409, 'an always model is never unloaded');
    assert.equal((await post('/v1/models/nope/load')).status, 404);
    r = await post('/v1/models/a/unload');
    assert.equal(r.status, 200);
    await waitFor(async () => stateOf(await capacity(n.url), 'a') === 'unloaded', { timeoutMs: 10_000, intervalMs: 50 });
    const req = await chat(n.url, 'big');
    // Nobody can fit it: the request waits its queue_timeout (an idle model could free room), then is told to retry.
    assert.ok(req.status === 429 || req.status === 503, JSON.stringify(req.body));
    assert.ok(Number(req.headers.get('retry-after')) > 0);
  });
});
