/**
 * SPEC section 12: tokens are charged at admission (the prompt plus the
 * `max_tokens` held back) "and settled from the engine's usage". A stream the
 * client leaves early never gets the engine's usage, so the node settles it
 * from what it relayed: the prompt and the streamed events (about one token
 * each). Before, such a request kept its whole held-back charge for the rest
 * of the minute, so a client that stopped a long answer could not send its
 * next turn under a `tpm` limit; and it was missing from the key's usage.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { waitFor } from '../fakes/wait.ts';
import { startMeshNode, stopAll, type MeshNode } from '../helpers/mesh.ts';
import { tempDir } from '../helpers/node.ts';
import { call, openPost } from '../helpers/http.ts';

const ADMIN = `adm-${crypto.randomBytes(12).toString('hex')}`;
const sha = (s: string) => crypto.createHash('sha256').update(s).digest('hex');
const auth = (key: string) => ({ authorization: `Bearer ${key}` });
// A long answer at 50 tokens a second: 20 s, far longer than the test reads of it.
const sim = { ttft_ms: 1, prefill_ms_per_1k: 1, tokens_per_s: 50, output_tokens: 1000 };
const MAX_TOKENS = 1000;
const TPM = 1500;

/** A streamed chat request that reads `events` SSE events of the answer, then leaves (the connection closed). */
async function streamThenLeave(url: string, key: string, events: number): Promise<{ status: number; limit?: unknown }> {
  const r = await openPost(`${url}/v1/chat/completions`, auth(key), { model: 'long', stream: true, max_tokens: MAX_TOKENS, messages: [{ role: 'user', content: 'tell me a long story' }] });
  if (r.status !== 200) return { status: r.status, limit: r.headers['x-viiwork-limit'], ...JSON.parse(await r.body.text()) };
  let seen = 0;
  try {
    for await (const chunk of r.body) {
      seen += (String(chunk).match(/^data: \{/gm) ?? []).length;
      if (seen >= events) break;
    }
  } finally {
    await r.close();
  }
  return { status: 200 };
}

describe('a stream the client leaves early is settled at what it used', () => {
  let node: MeshNode;
  let key = '';

  before(async () => {
    const keysFile = path.join(tempDir('viiwork-cut-'), 'keys.yaml');
    fs.writeFileSync(keysFile, `keys:\n  - name: ops\n    sha256: ${sha(ADMIN)}\n    role: admin\n`, { mode: 0o600 });
    node = await startMeshNode({ name: 'cut', ip: '127.0.79.1', api: { keys_file: keysFile }, models: [{ name: 'long', engine: 'sim', parallel: 2, sim }] });
    const made = await call(`${node.url}/v1/keys`, 'POST', auth(ADMIN), { name: 'reader', limits: { tpm: TPM } });
    assert.equal(made.status, 201, made.text);
    key = made.json.key;
  });
  after(() => stopAll([node]));

  it('frees the held-back output for the next request, and counts the request and what it streamed in the usage', async () => {
    const first = await streamThenLeave(node.url, key, 5);
    assert.equal(first.status, 200, JSON.stringify(first));
    // The node notices the client left, stops the engine and settles; the usage row is written in the same step.
    const row = await waitFor(
      async () => (await call(`${node.url}/v1/usage?key=reader`, 'GET', auth(ADMIN))).json.rows.find((r: any) => r.key === 'reader' && r.model === 'long'),
      { timeoutMs: 10_000, what: 'the stream left early in the key’s usage' },
    );
    assert.equal(row.requests, 1);
    assert.equal(row.errors, 0, 'a client that leaves is not an engine error');
    assert.ok(row.completion >= 4 && row.completion < 200, `completion tokens counted from what was streamed: ${JSON.stringify(row)}`);
    assert.ok(row.prompt_cached + row.prompt_uncached > 0, JSON.stringify(row));
    // 1,000 held back twice would pass tpm 1,500; with the first settled at what it used, the second is admitted.
    const second = await streamThenLeave(node.url, key, 1);
    assert.equal(second.status, 200, `the next request after a stream left early: ${JSON.stringify(second)}`);
    await waitFor(
      async () => (await call(`${node.url}/v1/usage?key=reader`, 'GET', auth(ADMIN))).json.rows.find((r: any) => r.key === 'reader' && r.requests === 2),
      { timeoutMs: 10_000, what: 'the second stream settled too' },
    );
  });

  it('a request that would pass the limit with its whole output still gets 429 tpm', async () => {
    // Two streams held at once (neither settled yet) hold 2 × 1,000 > 1,500: the limit itself still holds.
    const open = await openPost(`${node.url}/v1/chat/completions`, auth(key), { model: 'long', stream: true, max_tokens: MAX_TOKENS, messages: [{ role: 'user', content: 'another story' }] });
    try {
      assert.equal(open.status, 200);
      const refused = await streamThenLeave(node.url, key, 1);
      assert.equal(refused.status, 429);
      assert.equal(refused.limit, 'tpm');
    } finally {
      await open.close();
    }
  });
});
