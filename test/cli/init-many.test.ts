/**
 * Issue 41, item 4: `viiwork init` writes one `models: auto` entry for an
 * endpoint that serves many models (llama-server in router mode, Ollama,
 * LM Studio, any that lists more than one), and an entry per model for an
 * endpoint of one. The endpoints are fakes on loopback; the probe is real.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, it } from 'node:test';
import { engineEntries, probeLoopback } from '../../src/cli/discover.ts';
import { validateConfig } from '../../src/config/load.ts';

const HOST = '127.0.141.20';

/** An endpoint answering /v1/models with `data`, and /props with `props` (404 without). */
function endpoint(data: unknown[], props?: unknown): http.Server {
  return http.createServer((req, res) => {
    const doc = req.url === '/v1/models' ? { object: 'list', data } : req.url === '/props' && props ? props : undefined;
    res.writeHead(doc ? 200 : 404, { 'content-type': 'application/json' });
    res.end(JSON.stringify(doc ?? { error: 'not found' }));
  });
}

describe('viiwork init and endpoints that serve many models', () => {
  const servers: http.Server[] = [];
  const ports = [
    { port: 18151, engine: 'llama-server' }, // router mode, two models
    { port: 18152, engine: 'Ollama' }, // one model pulled so far
    { port: 18153, engine: 'vLLM' }, // one model
    { port: 18154, engine: 'llama-server' }, // a router whose models dir is empty yet
  ];
  before(async () => {
    const made = [
      endpoint([
        { id: 'alpha', status: { value: 'loaded' } },
        { id: 'beta', status: { value: 'unloaded' } },
      ]),
      endpoint([{ id: 'llama3.2:3b' }]),
      endpoint([{ id: 'served-elsewhere' }]),
      endpoint([], { role: 'router' }),
    ];
    await Promise.all(made.map((s, i) => new Promise<void>((r) => s.listen(ports[i].port, HOST, r))));
    servers.push(...made);
  });
  after(() => Promise.all(servers.map((s) => new Promise((r) => s.close(r)))));

  it('finds routers by their statuses or their /props, and writes models: auto for them and for Ollama', async () => {
    const found = await probeLoopback(ports, HOST);
    assert.deepEqual(
      found.map((e) => [e.port, e.engine, e.router, e.models]),
      [
        [18151, 'llama-server (router mode)', true, ['alpha', 'beta']],
        [18152, 'Ollama', false, ['llama3.2:3b']],
        [18153, 'vLLM', false, ['served-elsewhere']],
        [18154, 'llama-server (router mode)', true, []],
      ],
    );
    const entries = engineEntries(found, new Set());
    assert.deepEqual(entries, [
      { name: 'llama-server-router-mode', engine: 'openai', url: `http://${HOST}:18151`, models: 'auto' },
      { name: 'ollama', engine: 'openai', url: `http://${HOST}:18152`, models: 'auto' },
      { name: 'served-elsewhere', engine: 'openai', url: `http://${HOST}:18153`, parallel: 4 },
      { name: 'llama-server-router-mode', engine: 'openai', url: `http://${HOST}:18154`, models: 'auto' },
    ]);
    // What init writes is a valid config: the router's entries load on demand.
    const config = validateConfig({ models: entries });
    assert.deepEqual(
      config.models.map((m) => m.load),
      ['on_demand', 'on_demand', 'always', 'on_demand'],
    );
  });
});
