/**
 * Issue 41, item 4: an `openai` entry with `models: auto` serves every model
 * its endpoint lists, refreshed as the list changes; with llama-server's
 * router mode the node loads, unloads and reads slots per model through the
 * router's API. The endpoints here are fakes (node:http) that list models
 * and change their lists; the node is real. The real router is in
 * test/lifecycle/router-mode.test.ts.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, describe, it } from 'node:test';
import { request } from 'undici';
import { ConfigError, validateConfig } from '../../src/config/load.ts';
import { waitFor } from '../fakes/wait.ts';
import { startNode as startTestNode } from '../helpers/node.ts';

/** An OpenAI-compatible endpoint that serves many models; as a router, with llama-server's status, load and unload. */
class FakeEndpoint {
  /** Model → router status value ('loaded', 'loading', 'unloaded'); plain endpoints ignore it. */
  readonly models = new Map<string, string>();
  readonly calls: string[] = [];
  /** Models whose load fails (the router's child exits with code 1). */
  readonly broken = new Set<string>();
  down = false;
  server!: http.Server;
  constructor(readonly router: boolean) {}

  get url(): string {
    const a = this.server.address() as AddressInfo;
    return `http://${a.address}:${a.port}`;
  }

  async listen(host: string): Promise<void> {
    this.server = http.createServer((req, res) => void this.#handle(req, res));
    await new Promise<void>((r) => this.server.listen(0, host, r));
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((r) => this.server.close(() => r()));
  }

  async #handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    let body = '';
    for await (const c of req) body += c;
    const u = new URL(req.url!, 'http://x');
    const send = (status: number, doc: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(doc));
    };
    const refuse = (message: string) => send(400, { error: { code: 400, message, type: 'invalid_request_error' } });
    if (this.down) return void req.socket.destroy();
    this.calls.push(`${req.method} ${u.pathname}${u.search}${body ? ` ${body}` : ''}`);
    const model = body ? String(JSON.parse(body).model) : (u.searchParams.get('model') ?? '');
    const state = this.models.get(model);
    if (req.method === 'GET' && (u.pathname === '/v1/models' || u.pathname === '/models')) {
      const failed = (id: string, value: string) => (value === 'unloaded' && this.broken.has(id) ? { failed: true, exit_code: 1 } : {});
      return send(200, {
        object: 'list',
        data: [...this.models].map(([id, value]) => ({ id, object: 'model', ...(this.router ? { status: { value, args: ['llama-server', '--alias', id], ...failed(id, value) } } : {}) })),
      });
    }
    if (req.method === 'GET' && u.pathname === '/health') return this.router ? send(200, { status: 'ok' }) : send(404, { error: 'not found' });
    if (req.method === 'GET' && u.pathname === '/props') {
      if (!this.router) return send(404, {});
      if (!model) return send(200, { role: 'router', build_info: 'b1-test' });
      if (state !== 'loaded') return refuse('model is not loaded');
      return send(200, { total_slots: 2, default_generation_settings: { n_ctx: 512 }, build_info: 'b1-test' });
    }
    if (req.method === 'POST' && u.pathname === '/models/load') {
      if (state === undefined) return refuse(`model '${model}' not found`);
      if (state !== 'unloaded') return refuse('model is already running');
      this.models.set(model, 'loading');
      setTimeout(() => this.models.set(model, this.broken.has(model) ? 'unloaded' : 'loaded'), 100);
      return send(200, { success: true });
    }
    if (req.method === 'POST' && u.pathname === '/models/unload') {
      if (state !== 'loaded') return refuse('model is not running');
      setTimeout(() => this.models.set(model, 'unloaded'), 100);
      return send(200, { success: true });
    }
    if (req.method === 'POST' && u.pathname === '/v1/chat/completions') {
      if (state === undefined) return refuse(`model '${model}' not found`);
      if (this.router && state !== 'loaded') return refuse('model is not loaded');
      return send(200, {
        id: 'c1',
        object: 'chat.completion',
        model,
        choices: [{ index: 0, message: { role: 'assistant', content: `answered by ${model}` }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 },
      });
    }
    send(404, { error: { message: 'not found' } });
  }
}

/** A real node in this process, listing its endpoints every 200 ms. */
function startNode(host: string, models: Record<string, unknown>[]) {
  return startTestNode({ api: { host }, models }, { node: { listRefreshMs: 200 } });
}

async function listed(url: string): Promise<string[]> {
  const doc = (await (await request(`${url}/v1/models`)).body.json()) as { data: { id: string }[] };
  return doc.data.map((m) => m.id).sort();
}

async function chat(url: string, model: string): Promise<{ status: number; text: string }> {
  const r = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hello' }], max_tokens: 3 }),
  });
  return { status: r.statusCode, text: await r.body.text() };
}

interface TargetReport {
  name: string;
  slots: number;
  ctx: number;
  targets: { state: string; slots: number }[];
}
async function capacityOf(url: string, model: string): Promise<TargetReport | undefined> {
  const doc = (await (await request(`${url}/v1/capacity`)).body.json()) as { models: TargetReport[] };
  return doc.models.find((m) => m.name === model);
}

describe('an openai entry with models: auto', () => {
  const stops: (() => Promise<unknown>)[] = [];
  after(async () => {
    for (const s of stops.reverse()) await s();
  });

  it('serves every model the endpoint lists, by the listed id, and follows the list as models appear and go', async () => {
    const ep = new FakeEndpoint(false);
    ep.models.set('llama-3b', '').set('org/qwen:7b', '');
    await ep.listen('127.0.141.2');
    stops.push(() => ep.close());
    const t = await startNode('127.0.141.1', [{ name: 'ollama', engine: 'openai', url: `${ep.url}/v1`, models: 'auto' }]);
    stops.push(() => t.node.stop());

    assert.deepEqual(await listed(t.url), ['llama-3b', 'org/qwen:7b'], 'the listed ids are the model names; the entry name is only a label');
    await waitFor(async () => (await chat(t.url, 'org/qwen:7b')).status === 200, { timeoutMs: 10_000, what: 'the endpoint healthy' });
    const a = await chat(t.url, 'org/qwen:7b');
    assert.match(a.text, /answered by org\/qwen:7b/);
    assert.ok(ep.calls.some((c) => c.startsWith('POST /v1/chat/completions') && c.includes('"model":"org/qwen:7b"')), 'the endpoint gets the listed id back');

    ep.models.set('phi-4', '');
    ep.models.delete('llama-3b');
    await waitFor(async () => (await listed(t.url)).join() === 'org/qwen:7b,phi-4', { timeoutMs: 10_000, what: 'phi-4 listed and llama-3b gone' });
    await waitFor(async () => (await chat(t.url, 'phi-4')).status === 200, { timeoutMs: 10_000, what: 'a chat to the new model' });
    const gone = await chat(t.url, 'llama-3b');
    assert.equal(gone.status, 404, gone.text);
    assert.ok(t.logs.join('').includes('new: phi-4; gone: llama-3b'), 'the log says what changed');

    // An endpoint that stops answering keeps its models listed: its backends' health says it is down.
    ep.down = true;
    const calls = ep.calls.length;
    await waitFor(() => t.logs.join('').includes('cannot list the models of'), { timeoutMs: 10_000, what: 'the failed listing logged' });
    assert.deepEqual(await listed(t.url), ['org/qwen:7b', 'phi-4']);
    ep.down = false;
    await waitFor(() => ep.calls.length > calls, { timeoutMs: 10_000, what: 'listed again' });
    await waitFor(async () => (await chat(t.url, 'phi-4')).status === 200, { timeoutMs: 15_000, what: 'serving again' });
  });

  it("with llama-server's router mode: loads on request, reads each model's slots, unloads when idle, and follows the router's own unloads", async () => {
    const ep = new FakeEndpoint(true);
    ep.models.set('alpha', 'unloaded').set('beta', 'loaded');
    await ep.listen('127.0.141.3');
    stops.push(() => ep.close());
    const t = await startNode('127.0.141.4', [{ name: 'router', engine: 'openai', url: ep.url, models: 'auto', idle_unload: '4s' }]);
    stops.push(() => t.node.stop());

    assert.deepEqual(await listed(t.url), ['alpha', 'beta'], 'an unloaded model is listed too (available)');
    assert.equal((await capacityOf(t.url, 'alpha'))?.targets[0].state, 'unloaded');
    // beta was loaded before the node came: taken in as loaded, with the slots its child runs.
    await waitFor(async () => (await capacityOf(t.url, 'beta'))?.slots === 2, { timeoutMs: 10_000, what: 'beta taken in with 2 slots' });
    await waitFor(() => ep.calls.some((c) => c.startsWith('GET /v1/models?reload=1')), { what: 'a router asked to rescan its models' });

    const a = await chat(t.url, 'alpha');
    assert.equal(a.status, 200, a.text);
    assert.match(a.text, /answered by alpha/);
    assert.ok(ep.calls.includes('POST /models/load {"model":"alpha"}'), 'the node asked the router to load alpha');
    const cap = await capacityOf(t.url, 'alpha');
    assert.equal(cap?.targets[0].state, 'loaded');
    assert.equal(cap?.slots, 2, "slots are the router child's total_slots, not the entry's parallel (4)");
    assert.equal(cap?.ctx, 512, "context is the child's n_ctx");

    // The router drops beta by itself (its --models-max): the node counts it unloaded, and a request loads it again.
    ep.models.set('beta', 'unloaded');
    await waitFor(async () => (await capacityOf(t.url, 'beta'))?.targets[0].state === 'unloaded', { timeoutMs: 10_000, what: 'beta unloaded' });
    assert.match(t.logs.join(''), /unloading beta \(endpoint\): the router unloaded beta by itself/);

    // alpha idles past idle_unload: the node asks the router to unload it.
    await waitFor(() => ep.calls.includes('POST /models/unload {"model":"alpha"}'), { timeoutMs: 10_000, what: 'alpha unloaded when idle' });
    await waitFor(async () => (await capacityOf(t.url, 'alpha'))?.targets[0].state === 'unloaded', { timeoutMs: 10_000, what: 'alpha reported unloaded' });
    assert.equal(ep.models.get('alpha'), 'unloaded');
    assert.ok(!ep.calls.includes('POST /models/unload {"model":"beta"}'), 'a model the router dropped is not unloaded again');
  });

  it("a model the router cannot load fails the requests waiting for it with the router's word", async () => {
    const ep = new FakeEndpoint(true);
    ep.models.set('broken', 'unloaded');
    ep.broken.add('broken');
    await ep.listen('127.0.141.5');
    stops.push(() => ep.close());
    const t = await startNode('127.0.141.6', [{ name: 'router', engine: 'openai', url: ep.url, models: 'auto' }]);
    stops.push(() => t.node.stop());
    const r = await chat(t.url, 'broken');
    assert.equal(r.status, 503, r.text);
    assert.match(r.text, /model_load_failed/);
    assert.match(r.text, /the router could not load broken \(its process exited with code 1\)/);
  });
});

describe('models: auto in the config', () => {
  function problems(entry: Record<string, unknown>): { key: string; message: string; fix: string }[] {
    try {
      validateConfig({ models: [entry] });
    } catch (err) {
      return (err as ConfigError).findings;
    }
    return [];
  }

  it('is accepted on an openai entry, which then loads on demand unless told otherwise', () => {
    const c = validateConfig({ models: [{ name: 'many', engine: 'openai', url: 'http://127.0.0.1:8080', models: 'auto' }] });
    assert.equal(c.models[0].load, 'on_demand');
    const one = validateConfig({ models: [{ name: 'one', engine: 'openai', url: 'http://127.0.0.1:8080' }] });
    assert.equal(one.models[0].load, 'always');
  });

  it('is refused on any other engine, naming the key and the fix', () => {
    const [p] = problems({ name: 'x', engine: 'llamacpp', path: '/m.gguf', models: 'auto' });
    assert.equal(p.key, 'models[0].models');
    assert.match(p.message, /for an openai entry only/);
    assert.match(p.fix, /remove models from this entry, or make it engine: openai/);
  });

  it('takes only the value auto, and no replicas', () => {
    const [p] = problems({ name: 'x', engine: 'openai', url: 'http://127.0.0.1:8080', models: 'all' });
    assert.equal(p.key, 'models[0].models');
    assert.match(p.fix, /write models: auto/);
    const [r] = problems({ name: 'x', engine: 'openai', url: 'http://127.0.0.1:8080', models: 'auto', replicas: 2 });
    assert.equal(r.key, 'models[0].replicas');
  });

  it('leaves an openai entry of one model unable to be on_demand', () => {
    const [p] = problems({ name: 'x', engine: 'openai', url: 'http://127.0.0.1:8080', load: 'on_demand' });
    assert.equal(p.key, 'models[0].load');
    assert.match(p.message, /models: auto for a llama-server in router mode/);
  });
});
