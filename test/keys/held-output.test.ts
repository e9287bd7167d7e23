/**
 * SPEC section 12: a request is charged at admission with its prompt plus the
 * `max_tokens` held back. Agent clients ask for more output than a local
 * model's context holds (Claude Code: 32,000), and an engine generates at
 * most what its context holds, so the held-back output is capped at the
 * largest context of a host of the model. Before, a key with `tpm: 6000`
 * could not send one such request at all (429 tpm). The entry's figure rides
 * to the executor in the forward's signed `out` claim, so the executor
 * settles against the same charge the entry made.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { heldOutput } from '../../src/keys/limits.ts';
import { waitFor } from '../fakes/wait.ts';
import { startMeshNode, stopAll, type MeshNode } from '../helpers/mesh.ts';
import { tempDir } from '../helpers/node.ts';
import { call, openPost } from '../helpers/http.ts';

const ADMIN = `adm-${crypto.randomBytes(12).toString('hex')}`;
const sha = (s: string) => crypto.createHash('sha256').update(s).digest('hex');
const auth = (key: string) => ({ authorization: `Bearer ${key}` });
const CONTEXT = 4096;
const TPM = 6000;
const AGENT_MAX_TOKENS = 32000;
const TPM2 = 18_500;

describe('held-back output (pure)', () => {
  it('is the bound, capped at the largest context known; no context known leaves a bound as it is', () => {
    assert.equal(heldOutput(32000, [4096, 8192, undefined]), 8192);
    assert.equal(heldOutput(1000, [4096]), 1000);
    assert.equal(heldOutput(32000, []), 32000);
    assert.equal(heldOutput(32000, [undefined, Infinity, 0]), 32000);
  });
  it('without a bound, the rest of the largest context, so prompt and output are held at the whole context (issue 46)', () => {
    assert.equal(heldOutput(undefined, [4096]), 4096);
    assert.equal(heldOutput(undefined, [2048, 8192], 1000), 7192);
    assert.equal(heldOutput(undefined, [2048], 5000), 0);
    // No context known: llama-server's old default context, not the 256 that let a key spend 12 times its tpm.
    assert.equal(heldOutput(undefined, []), 4096);
  });
});

describe('an agent-sized max_tokens under a tpm limit, through an entry and an executor', () => {
  const nodes: MeshNode[] = [];
  let entry: MeshNode;
  let key = '';

  /** A streamed request whose headers are read (the stream left open); `close` ends it. */
  async function open(node: MeshNode, maxTokens: number) {
    const r = await openPost(`${node.url}/v1/chat/completions`, auth(key), { model: 'small-ctx', stream: true, max_tokens: maxTokens, messages: [{ role: 'user', content: 'fix the failing test' }] });
    return { status: r.status, limit: r.headers['x-viiwork-limit'], close: r.close };
  }

  before(async () => {
    const secret = crypto.randomBytes(32).toString('base64');
    const env = { VIIWORK_MESH_SECRET: secret };
    const keysFile = path.join(tempDir('viiwork-held-'), 'keys.yaml');
    fs.writeFileSync(keysFile, `keys:\n  - name: ops\n    sha256: ${sha(ADMIN)}\n    role: admin\n`, { mode: 0o600 });
    // The executor's engine answers slowly enough that a stream is still open while the next request is admitted.
    const sim = { ttft_ms: 1, prefill_ms_per_1k: 1, tokens_per_s: 20, output_tokens: 400 };
    nodes.push((entry = await startMeshNode({ name: 'entry', ip: '127.0.79.11', env, api: { keys_file: keysFile }, models: [] })));
    const fast = { ttft_ms: 1, prefill_ms_per_1k: 1, tokens_per_s: 1_000_000, output_tokens: 4000 };
    const short = { ttft_ms: 1, prefill_ms_per_1k: 1, tokens_per_s: 1_000_000, output_tokens: 1000 };
    nodes.push(
      await startMeshNode({
        name: 'exec',
        ip: '127.0.79.12',
        env,
        seeds: [entry.gossip],
        models: [
          { name: 'small-ctx', engine: 'sim', parallel: 4, context: CONTEXT, sim },
          { name: 'fast-ctx', engine: 'sim', parallel: 4, context: CONTEXT, sim: fast },
          { name: 'short-ctx', engine: 'sim', parallel: 4, context: CONTEXT, sim: short },
        ],
      }),
    );
    await waitFor(
      async () => {
        const fleet = await call(`${entry.url}/v1/fleet/capacity`, 'GET', auth(ADMIN));
        return fleet.json?.models?.filter((m: any) => ['small-ctx', 'fast-ctx', 'short-ctx'].includes(m.name) && m.hosts.some((h: any) => h.node === 'exec' && h.fresh && h.slots > 0)).length === 3;
      },
      { timeoutMs: 15_000, what: 'the three models on exec seen from the entry' },
    );
    const made = await call(`${entry.url}/v1/keys`, 'POST', auth(ADMIN), { name: 'agent', limits: { tpm: TPM } });
    assert.equal(made.status, 201, made.text);
    key = made.json.key;
    await waitFor(async () => (await call(`${nodes[1].url}/v1/models`, 'GET', auth(key))).status === 200, { timeoutMs: 5000, what: 'the key known on the executor' });
  });
  after(() => stopAll(nodes));

  it('is admitted at the context it can use; a second at once passes tpm and gets 429', async () => {
    const first = await open(entry, AGENT_MAX_TOKENS);
    try {
      assert.equal(first.status, 200, `max_tokens ${AGENT_MAX_TOKENS} on a model of ${CONTEXT} under tpm ${TPM}`);
      // The first holds about 4,100 of 6,000 until it ends: the limit still holds for the second.
      const second = await open(entry, AGENT_MAX_TOKENS);
      await second.close();
      assert.equal(second.status, 429);
      assert.equal(second.limit, 'tpm');
    } finally {
      await first.close();
    }
  });

  it('the executor settles against the entry’s figure (the `out` claim), not the body’s 32,000', async () => {
    // A second key: 12,021 tokens really used on fast-ctx, then an agent-sized request on short-ctx (held 4,097, used
    // 1,007): 13,028 spent once the executor's settlements reach the key's owner. Settled against the body's 32,000
    // instead, the agent request would hand back ~31,000 and wipe the real use out of the key's minute.
    const made = await call(`${entry.url}/v1/keys`, 'POST', auth(ADMIN), { name: 'agent2', limits: { tpm: TPM2 } });
    assert.equal(made.status, 201, made.text);
    const key2 = made.json.key;
    await waitFor(async () => (await call(`${nodes[1].url}/v1/models`, 'GET', auth(key2))).status === 200, { timeoutMs: 5000, what: 'agent2 known on the executor' });
    // A whole answer's completion tokens, or undefined for a 429 (while the key is new at its owner, its first 2 s,
    // every member counts as an entry, so the entry's share is half of what is left: a request may wait for room).
    const whole = async (model: string, maxTokens: number): Promise<number | undefined> => {
      const r = await call(`${entry.url}/v1/chat/completions`, 'POST', auth(key2), { model, max_tokens: maxTokens, messages: [{ role: 'user', content: 'go' }] });
      if (r.status === 429) return undefined;
      assert.equal(r.status, 200, r.text);
      return r.json.usage.completion_tokens as number;
    };
    const admitted = (model: string, maxTokens: number) => waitFor(() => whole(model, maxTokens), { timeoutMs: 10_000, intervalMs: 50, what: `${model} with max_tokens ${maxTokens} admitted` });
    for (let i = 0; i < 3; i++) assert.equal(await admitted('fast-ctx', 4000), 4000);
    assert.equal(await admitted('short-ctx', AGENT_MAX_TOKENS), 1000);
    const prevKey = key;
    key = key2;
    try {
      // Before the settlements arrive the entry counts 16,100 held, and one more (4,097) would pass 18,500: the first
      // is admitted once they have (13,028 + 4,097).
      const first = await waitFor(
        async () => {
          const o = await open(entry, AGENT_MAX_TOKENS);
          if (o.status === 200) return o;
          await o.close();
          return undefined;
        },
        { timeoutMs: 10_000, intervalMs: 50, what: 'one agent request admitted after the settlements' },
      );
      const second = await open(entry, AGENT_MAX_TOKENS);
      await second.close();
      await first.close();
      // 13,028 + 2 × 4,097 > 18,500. Had the settlement wiped the minute, the two (8,194) would fit any share of it.
      assert.equal(second.status, 429, `the real use plus two held requests passes tpm ${TPM2}`);
    } finally {
      key = prevKey;
    }
  });
});
