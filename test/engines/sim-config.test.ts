/**
 * The sim engine's own keys (issue 11): the prompt cache switch, llama-server's
 * slot similarity, and a fixed loopback address, accepted by the config schema
 * the way `viiwork check` reads them; and llama-server's slot erase.
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import { describe, it } from 'node:test';
import { request } from 'undici';
import { stringify } from 'yaml';
import { ConfigError, parseConfigText } from '../../src/config/load.ts';
import type { SimSettings } from '../../src/config/schema.ts';
import { SimBackend } from '../../src/engines/sim.ts';

const timings = { ttft_ms: 1, prefill_ms_per_1k: 10, tokens_per_s: 5000, output_tokens: 2 };

function configWith(model: Record<string, unknown>): string {
  return stringify({ node: { name: 'n1' }, models: [{ name: 'm', engine: 'sim', ...model }] });
}

function problem(text: string): string {
  try {
    parseConfigText(text);
  } catch (err) {
    assert.ok(err instanceof ConfigError, String(err));
    return err.message;
  }
  assert.fail('the config was accepted');
}

async function freePort(host: string): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, host, () => r()));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

async function start(sim: SimSettings, parallel = 2): Promise<SimBackend> {
  const b = new SimBackend({ id: 'm/0', model: 'm', index: 0, parallel, context: 8192, engine: 'sim' }, { workloads: ['chat', 'completion'], audio: false }, sim, () => {});
  await b.start();
  return b;
}

async function post(url: string, body?: unknown): Promise<{ status: number; doc: any }> {
  const r = await request(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: r.statusCode, doc: await r.body.json() };
}

describe('sim keys in the config schema', () => {
  it('accepts cache, slot_prompt_similarity, host and port, and leaves them out when absent', () => {
    const c = parseConfigText(configWith({ parallel: 3, sim: { ...timings, cache: false, slot_prompt_similarity: 0.3, host: '127.0.50.11', port: 18801 } }));
    const m = c.models[0];
    assert.equal(m.engine, 'sim');
    if (m.engine !== 'sim') return;
    assert.deepEqual(m.sim, { ...timings, cache: false, slot_prompt_similarity: 0.3, host: '127.0.50.11', port: 18801 });
    const d = parseConfigText(configWith({}));
    assert.deepEqual(d.models[0].engine === 'sim' && d.models[0].sim, { ttft_ms: 80, prefill_ms_per_1k: 40, tokens_per_s: 60, output_tokens: 32 });
  });

  it('refuses a non-loopback host, a similarity outside [0, 1], a typo, and a fixed port with replicas', () => {
    assert.match(problem(configWith({ sim: { ...timings, host: '10.0.0.5' } })), /models\[0\]\.sim\.host.*loopback/s);
    assert.match(problem(configWith({ sim: { ...timings, host: 'localhost' } })), /models\[0\]\.sim\.host/);
    assert.match(problem(configWith({ sim: { ...timings, slot_prompt_similarity: 1.5 } })), /models\[0\]\.sim\.slot_prompt_similarity.*from 0 to 1/s);
    assert.match(problem(configWith({ sim: { ...timings, cache_prompt: true } })), /models\[0\]\.sim\.cache_prompt/);
    assert.match(problem(configWith({ replicas: 2, sim: { ...timings, port: 18801 } })), /models\[0\]\.sim\.port.*replicas/s);
    // Port 0 (any port) goes with replicas.
    assert.equal(parseConfigText(configWith({ replicas: 2, sim: { ...timings, port: 0 } })).models[0].replicas, 2);
  });
});

describe('sim engine address and slot erase', () => {
  it('listens where sim.host and sim.port say', async () => {
    const port = await freePort('127.0.0.1');
    const b = await start({ ...timings, host: '127.0.0.1', port });
    try {
      assert.equal(b.url, `http://127.0.0.1:${port}`);
      const r = await request(`${b.url}/health`);
      assert.equal(r.statusCode, 200);
      await r.body.text();
    } finally {
      await b.stop();
    }
  });

  it('POST /slots/{id}?action=erase empties one slot: the next identical prompt is cached no more', async () => {
    const b = await start(timings, 1);
    try {
      const body = { model: 'm', messages: [{ role: 'system', content: 'A long shared system prompt. '.repeat(40) }, { role: 'user', content: 'hi' }] };
      assert.equal((await post(`${b.url}/v1/chat/completions`, body)).doc.usage.prompt_tokens_details.cached_tokens, 0);
      assert.ok((await post(`${b.url}/v1/chat/completions`, body)).doc.usage.prompt_tokens_details.cached_tokens > 200);
      const erased = await post(`${b.url}/slots/0?action=erase`);
      assert.equal(erased.status, 200);
      assert.equal(erased.doc.id_slot, 0);
      assert.ok(erased.doc.n_erased > 200);
      assert.equal((await post(`${b.url}/v1/chat/completions`, body)).doc.usage.prompt_tokens_details.cached_tokens, 0);
      assert.equal((await post(`${b.url}/slots/7?action=erase`)).status, 404);
      assert.equal((await post(`${b.url}/slots/0?action=restore`)).status, 404);
    } finally {
      await b.stop();
    }
  });

  it('with a RAM pool, an erase leaves the pool (a prompt comes back from RAM) and POST /cache/clear empties both', async () => {
    const b = await start({ ...timings, cache_ram: 100_000 }, 1);
    try {
      const a = { model: 'm', messages: [{ role: 'system', content: 'Conversation A shares nothing. '.repeat(40) }, { role: 'user', content: 'hi' }] };
      const other = { model: 'm', messages: [{ role: 'system', content: 'Conversation B is elsewhere. '.repeat(40) }, { role: 'user', content: 'hi' }] };
      await post(`${b.url}/v1/chat/completions`, a);
      await post(`${b.url}/v1/chat/completions`, other); // A goes to RAM as B takes the one slot
      assert.equal((await post(`${b.url}/slots/0?action=erase`)).status, 200);
      assert.ok((await post(`${b.url}/v1/chat/completions`, a)).doc.usage.prompt_tokens_details.cached_tokens > 200, 'A restored from the pool after an erase');
      const cleared = await post(`${b.url}/cache/clear`);
      assert.equal(cleared.status, 200);
      assert.ok(cleared.doc.n_erased > 200);
      assert.equal((await post(`${b.url}/v1/chat/completions`, other)).doc.usage.prompt_tokens_details.cached_tokens, 0, 'B was in the pool before the clear');
      // Only the chat template's first tokens, shared with B now in the slot: A left the pool with the clear.
      assert.ok((await post(`${b.url}/v1/chat/completions`, a)).doc.usage.prompt_tokens_details.cached_tokens < 20);
    } finally {
      await b.stop();
    }
  });
});
