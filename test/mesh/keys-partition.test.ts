/**
 * Issue 26, acceptance: a node cut off (nftables, as the membership test
 * does) while keys change converges once healed: a key revoked on the
 * majority side is refused by the node that was away, and a key added on
 * that node reaches the others.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { waitFor } from '../fakes/wait.ts';
import { startMeshNode, stopAll, type MeshNode } from '../helpers/mesh.ts';
import { tempDir } from '../helpers/node.ts';

const IP = (n: number) => `127.0.77.${n}`;
const isRoot = process.platform === 'linux' && process.getuid?.() === 0;
const sim = { ttft_ms: 1, prefill_ms_per_1k: 1, tokens_per_s: 2000, output_tokens: 1 };
const ADMIN = `adm-${crypto.randomBytes(12).toString('hex')}`;
const sha = (s: string) => crypto.createHash('sha256').update(s).digest('hex');

async function call(url: string, method: string, key: string, body?: unknown) {
  const r = await request(url, { method: method as 'GET', headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) }, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await r.body.text();
  return { status: r.statusCode, json: text.startsWith('{') ? JSON.parse(text) : undefined, text };
}
const chat = (n: MeshNode, key: string) => call(`${n.url}/v1/chat/completions`, 'POST', key, { model: 'm', messages: [{ role: 'user', content: 'hi' }] });
const memberState = async (n: MeshNode, of: string) => (await call(`${n.url}/v1/mesh`, 'GET', ADMIN)).json?.members.find((m: any) => m.name === of)?.state;

describe('keys across a partition (nftables)', () => {
  let skip: string | undefined;
  const nodes: MeshNode[] = [];
  const table = `viiwork_keys_${process.pid}`;
  const nft = (script: string) => execFileSync('nft', ['-f', '-'], { input: script, stdio: ['pipe', 'ignore', 'pipe'] });
  before(async () => {
    if (!isRoot) skip = 'needs root for nftables';
    else {
      try {
        execFileSync('nft', ['--version'], { stdio: 'ignore' });
      } catch {
        skip = 'nft is not installed (apt-get install nftables)';
      }
    }
    if (skip) return;
    const keysFile = path.join(tempDir('viiwork-keys-'), 'keys.yaml');
    fs.writeFileSync(keysFile, `keys:\n  - name: ops\n    sha256: ${sha(ADMIN)}\n    role: admin\n`, { mode: 0o600 });
    const env = { VIIWORK_MESH_SECRET: crypto.randomBytes(32).toString('base64') };
    const seeds = [1, 2, 3].map((i) => `${IP(i)}:7946`);
    for (let i = 1; i <= 3; i++) {
      nodes.push(await startMeshNode({ name: `k${i}`, ip: IP(i), env, seeds, api: { keys_file: keysFile }, mesh: { rejoin_interval: '2s' }, models: [{ name: 'm', engine: 'sim', parallel: 2, sim }] }));
    }
    await waitFor(async () => {
      for (const n of nodes) for (const o of nodes) if ((await memberState(n, o.name)) !== 'alive') return false;
      return true;
    }, { timeoutMs: 20_000, what: 'mesh converged' });
  });
  after(async () => {
    try {
      execFileSync('nft', ['delete', 'table', 'inet', table], { stdio: 'ignore' });
    } catch {
      // not there
    }
    await stopAll(nodes);
  });

  it('a revocation and an addition made during the split hold on both sides once healed', async (t) => {
    if (skip) return t.skip(skip);
    const [k1, k2, k3] = nodes;
    const doomed = await call(`${k1.url}/v1/keys`, 'POST', ADMIN, { name: 'doomed' });
    assert.equal(doomed.status, 201, doomed.text);
    await waitFor(async () => (await chat(k3, doomed.json.key)).status === 200, { timeoutMs: 2000, what: 'doomed works on k3' });
    nft(`table inet ${table} {
      chain out { type filter hook output priority 0; policy accept;
        ip saddr { ${IP(1)}, ${IP(2)} } ip daddr ${IP(3)} meta l4proto { tcp, udp } th dport { 7946, 8086 } drop
        ip saddr ${IP(3)} ip daddr { ${IP(1)}, ${IP(2)} } meta l4proto { tcp, udp } th dport { 7946, 8086 } drop
        ip saddr { ${IP(1)}, ${IP(2)} } ip daddr ${IP(3)} meta l4proto { tcp, udp } th sport { 7946, 8086 } drop
        ip saddr ${IP(3)} ip daddr { ${IP(1)}, ${IP(2)} } meta l4proto { tcp, udp } th sport { 7946, 8086 } drop
      }
    }`);
    let fresh = '';
    try {
      await waitFor(async () => (await memberState(k1, 'k3')) === 'dead' && (await memberState(k3, 'k1')) === 'dead', { timeoutMs: 40_000, what: 'both sides mark the other dead' });
      assert.equal((await call(`${k2.url}/v1/keys/doomed`, 'DELETE', ADMIN)).status, 200);
      const made = await call(`${k3.url}/v1/keys`, 'POST', ADMIN, { name: 'island' });
      assert.equal(made.status, 201, made.text);
      fresh = made.json.key;
      // Cut off, k3 cannot know of the revocation: it still admits the key; k1 has never heard of island.
      assert.equal((await chat(k3, doomed.json.key)).status, 200);
      assert.equal((await chat(k1, fresh)).status, 401);
    } finally {
      execFileSync('nft', ['delete', 'table', 'inet', table]);
    }
    await waitFor(async () => (await chat(k3, doomed.json.key)).status === 401, { timeoutMs: 20_000, what: 'k3 learns of the revocation' });
    for (const n of [k1, k2]) await waitFor(async () => (await chat(n, fresh)).status === 200, { timeoutMs: 20_000, what: `island works on ${n.name}` });
    const versions = await Promise.all(nodes.map(async (n) => (await call(`${n.url}/v1/keys`, 'GET', ADMIN)).json.version));
    assert.equal(new Set(versions).size, 1, `one table version everywhere: ${versions}`);
  });
});
