/** Aliases on one node: resolved once at entry for the request's workload, fallbacks, 503 when nothing is served, listed in /v1/models. */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { startNode, type TestNode } from '../helpers/node.ts';

async function call(url: string, method: string, path: string, body?: unknown) {
  const res = await request(url + path, { method: method as 'POST', headers: { 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.body.text();
  return { status: res.statusCode, headers: res.headers, json: text ? JSON.parse(text) : undefined };
}

describe('aliases on a node', () => {
  let t: TestNode;
  before(async () => {
    t = await startNode({
      models: [
        { name: 'big', engine: 'sim', parallel: 2, sim: { ttft_ms: 1, prefill_ms_per_1k: 1, tokens_per_s: 1000, output_tokens: 2 } },
        { name: 'emb', engine: 'sim', parallel: 2, workloads: ['embeddings'], sim: { ttft_ms: 1, prefill_ms_per_1k: 1, tokens_per_s: 1000, output_tokens: 1 } },
      ],
      aliases: { fromconfig: 'big' },
    });
  });
  after(() => t.stop());

  it('resolves an alias, with X-Viiwork-Alias and X-Viiwork-Model, and the engine sees the real name', async () => {
    const set = await call(t.url, 'PUT', '/v1/aliases/coder', { target: 'big', fallbacks: [] });
    assert.equal(set.status, 200);
    assert.equal(set.json.reached, 1);
    const r = await call(t.url, 'POST', '/v1/chat/completions', { model: 'coder', messages: [{ role: 'user', content: 'x' }] });
    assert.equal(r.status, 200);
    assert.equal(r.headers['x-viiwork-alias'], 'coder');
    assert.equal(r.headers['x-viiwork-model'], 'big');
    assert.equal(r.json.model, 'big');
  });

  it('falls back to the first target served for the workload', async () => {
    await call(t.url, 'PUT', '/v1/aliases/vec', { target: 'gone', fallbacks: ['big', 'emb'] });
    const e = await call(t.url, 'POST', '/v1/embeddings', { model: 'vec', input: 'x' });
    assert.equal(e.status, 200);
    assert.equal(e.headers['x-viiwork-model'], 'emb');
    const c = await call(t.url, 'POST', '/v1/chat/completions', { model: 'vec', messages: [] });
    assert.equal(c.headers['x-viiwork-model'], 'big');
  });

  it('answers 503 Retry-After 5 when none of the alias’s targets is served', async () => {
    await call(t.url, 'PUT', '/v1/aliases/nothing', { target: 'gone', fallbacks: ['also-gone'] });
    const r = await call(t.url, 'POST', '/v1/chat/completions', { model: 'nothing', messages: [] });
    assert.equal(r.status, 503);
    assert.equal(r.headers['retry-after'], '5');
    assert.equal(r.json.error.code, 'alias_unserved');
  });

  it('lets a real model name win over an alias of the same name', async () => {
    await call(t.url, 'PUT', '/v1/aliases/emb', { target: 'big', fallbacks: [] });
    const r = await call(t.url, 'POST', '/v1/embeddings', { model: 'emb', input: 'x' });
    assert.equal(r.status, 200);
    assert.equal(r.headers['x-viiwork-alias'], undefined);
  });

  it('lists aliases in /v1/models as owned_by alias, config aliases included, and publishes alias_version', async () => {
    const m = await call(t.url, 'GET', '/v1/models');
    const ids = m.json.data.map((x: { id: string; owned_by: string }) => `${x.id}:${x.owned_by}`);
    assert.deepEqual(ids, ['big:viiwork', 'coder:alias', 'emb:viiwork', 'fromconfig:alias', 'nothing:alias', 'vec:alias']);
    const cap = await call(t.url, 'GET', '/v1/capacity');
    assert.ok(cap.json.alias_version >= 4);
  });

  it('stays removed after rm', async () => {
    assert.equal((await call(t.url, 'DELETE', '/v1/aliases/coder')).status, 200);
    const r = await call(t.url, 'POST', '/v1/chat/completions', { model: 'coder', messages: [] });
    assert.equal(r.status, 404);
  });
});
