/**
 * The executor's line on a real secured node (queue/gate.ts; docs/api.md
 * "Fair queueing across entry nodes"): a keyed forward that finds every slot
 * busy waits there when its entry allows (the signed `wait` claim), and the
 * slot that frees goes to the waiter that ranks first — band (the signed
 * `band` claim may lower a key, never raise it), then the key's service —
 * not to whoever came first. A forward that may not wait is refused at once
 * as before; one whose wait runs out is refused marked `waited`.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { RequestSigner } from '../../src/security/signing.ts';
import { waitFor } from '../fakes/wait.ts';
import { getJson, startMeshNode, stopAll, type MeshNode } from '../helpers/mesh.ts';

const IP = (n: number) => `127.0.123.${n}`;
const secret = crypto.randomBytes(32).toString('base64');
const env = { VIIWORK_MESH_SECRET: secret };
const signer = new RequestSigner(Buffer.from(secret, 'base64'));
const sha = (s: string) => crypto.createHash('sha256').update(s).digest('hex');

/** A keys file of [name, priority, role] entries; each key's secret is `vk-NAME`. */
function writeKeys(keys: [string, string?, string?][]): string {
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'viiwork-line-')), 'keys.yaml');
  const entry = ([name, priority = 'interactive', role = 'user']: [string, string?, string?]) => `  - name: ${name}\n    sha256: ${sha(`vk-${name}`)}\n    role: ${role}\n    priority: ${priority}\n`;
  fs.writeFileSync(file, `keys:\n${keys.map(entry).join('')}`, { mode: 0o600 });
  return file;
}

/** A forward signed as member `entry`, with `claims`; resolves when its answer is whole. */
async function forward(exec: MeshNode, text: string, claims: string): Promise<{ status: number; refused?: string; body: string }> {
  const body = JSON.stringify({ model: 'm', max_tokens: 2, messages: [{ role: 'user', content: text }] });
  const headers = signer.sign({ method: 'POST', pathWithQuery: '/v1/chat/completions', node: 'entry', to: 'exec', bodySha256: sha(body), claims });
  const r = await request(`${exec.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
  const refused = r.headers['x-viiwork-refused'];
  return { status: r.statusCode, ...(typeof refused === 'string' ? { refused } : {}), body: await r.body.text() };
}

async function lineDepth(exec: MeshNode): Promise<number> {
  const text = await (await request(`${exec.url}/metrics`)).body.text();
  const m = /viiwork_forward_line_depth\{model="m"\} (\d+)/.exec(text);
  return m ? Number(m[1]) : -1;
}

async function busy(exec: MeshNode): Promise<boolean> {
  const report = await getJson(`${exec.url}/v1/capacity`);
  return report.models.find((m: { name: string }) => m.name === 'm')?.busy === 1;
}

describe('the executor orders forwards that wait for its slot', () => {
  let entry: MeshNode, exec: MeshNode;
  before(async () => {
    const keysFile = writeKeys([['ops', 'interactive', 'admin'], ['int'], ['int2'], ['bat', 'batch']]);
    // One slot; each answer holds it for a while, so the forwards behind it wait.
    exec = await startMeshNode({
      name: 'exec',
      ip: IP(2),
      env,
      api: { keys_file: keysFile },
      routing: { forward_wait: '30s' },
      models: [{ name: 'm', engine: 'sim', parallel: 1, sim: { ttft_ms: 700, prefill_ms_per_1k: 1, tokens_per_s: 1000, output_tokens: 2 } }],
    });
    entry = await startMeshNode({ name: 'entry', ip: IP(1), env, seeds: [exec.gossip], api: { keys_file: keysFile } });
    // The executor takes signed forwards from `entry` once it knows it as a member (with keys, /v1/mesh needs an admin key).
    await waitFor(async () => (await forward(exec, 'warm', 'key=int')).status === 200, { what: 'exec takes forwards from entry', timeoutMs: 20_000 });
  });
  after(() => stopAll([entry, exec]));

  it('an interactive forward gets the freed slot before a forward lowered to batch by its band claim that came first', async () => {
    const holder = forward(exec, 'holds the slot', 'key=bat');
    await waitFor(() => busy(exec), { what: 'the slot busy', timeoutMs: 10_000 });
    const order: string[] = [];
    const lowered = forward(exec, 'lowered', 'key=int;band=batch;wait=30000').then((r) => (order.push('lowered'), r));
    await waitFor(async () => (await lineDepth(exec)) === 1, { what: 'the lowered forward waiting', timeoutMs: 10_000 });
    const inter = forward(exec, 'interactive', 'key=int2;wait=30000').then((r) => (order.push('interactive'), r));
    await waitFor(async () => (await lineDepth(exec)) === 2, { what: 'both waiting', timeoutMs: 10_000 });
    // A forward its entry did not let wait is refused at once, as without the line.
    const plain = await forward(exec, 'no wait', 'key=int');
    assert.equal(plain.status, 429, plain.body);
    assert.equal(plain.refused, 'full');
    const [h, l, i] = await Promise.all([holder, lowered, inter]);
    for (const r of [h, l, i]) assert.equal(r.status, 200, r.body);
    assert.deepEqual(order, ['interactive', 'lowered']);
    assert.equal(await lineDepth(exec), 0);
  });

  it('a wait that runs out is refused marked waited, so the entry places it again', async () => {
    const holder = forward(exec, 'holds the slot again', 'key=bat');
    await waitFor(() => busy(exec), { what: 'the slot busy', timeoutMs: 10_000 });
    const r = await forward(exec, 'waits a moment', 'key=int;wait=1');
    assert.equal(r.status, 429, r.body);
    assert.equal(r.refused, 'waited');
    assert.equal(JSON.parse(r.body).error.code, 'no_free_slot');
    assert.equal((await holder).status, 200);
  });
});

describe('fairness held across entry nodes', () => {
  let entry: MeshNode, exec: MeshNode;
  const keyOf = (name: string) => `Bearer vk-${name}`;
  async function chat(url: string, name: string, content: string, extra: Record<string, string> = {}) {
    const r = await request(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: keyOf(name), ...extra },
      body: JSON.stringify({ model: 'm', max_tokens: 2, messages: [{ role: 'user', content }] }),
    });
    return { status: r.statusCode, node: r.headers['x-viiwork-node'], body: await r.body.text() };
  }
  async function metric(node: MeshNode, re: RegExp): Promise<number> {
    const m = re.exec(await (await request(`${node.url}/metrics`)).body.text());
    return m ? Number(m[1]) : -1;
  }

  before(async () => {
    const keysFile = writeKeys([['int'], ['bat', 'batch']]);
    exec = await startMeshNode({
      name: 'exec2',
      ip: IP(4),
      env,
      api: { keys_file: keysFile },
      // The line is opt-in (SPEC 9 step 2 refuses a forward at once by default): the executor allows waits.
      routing: { queue_timeout: '60s', forward_wait: '2s' },
      mesh: { capacity_poll: '250ms' },
      models: [{ name: 'm', engine: 'sim', parallel: 1, sim: { ttft_ms: 700, prefill_ms_per_1k: 1, tokens_per_s: 1000, output_tokens: 2 } }],
    });
    entry = await startMeshNode({ name: 'entry2', ip: IP(3), env, seeds: [exec.gossip], api: { keys_file: keysFile }, routing: { queue_timeout: '60s', forward_wait: '2s' }, mesh: { capacity_poll: '250ms' } });
    await waitFor(async () => (await chat(entry.url, 'int', 'warm')).status === 200, { what: 'entry routes to exec', timeoutMs: 20_000 });
  });
  after(() => stopAll([entry, exec]));

  it("a slot that frees on a host goes to an interactive request waiting at another entry, not to the host's own batch waiter", async () => {
    const order: string[] = [];
    const holder = chat(exec.url, 'bat', 'holds the slot');
    await waitFor(() => busy(exec), { what: 'the slot busy', timeoutMs: 10_000 });
    const batch = chat(exec.url, 'bat', 'waits on the host').then((r) => (order.push('batch'), r));
    await waitFor(async () => (await metric(exec, /viiwork_queue_depth\{model="m",workload="chat"\} (\d+)/)) === 1, { what: 'batch queued on the host', timeoutMs: 10_000 });
    // The entry sees the host full (its report) and sends the interactive request to wait in the host's line.
    const inter = chat(entry.url, 'int', 'interactive, elsewhere').then((r) => (order.push('interactive'), r));
    await waitFor(async () => (await metric(exec, /viiwork_forward_line_depth\{model="m"\} (\d+)/)) === 1, { what: 'the interactive request waiting at the host', timeoutMs: 15_000 });
    const [h, b, i] = await Promise.all([holder, batch, inter]);
    for (const r of [h, b, i]) assert.equal(r.status, 200, r.body);
    assert.equal(i.node, 'exec2');
    assert.deepEqual(order, ['interactive', 'batch']);
  });
});

