/**
 * Issue 46: a shared fleet attacked by its own key holders, on a secured
 * three-node mesh of real processes. Each case failed on the code before it:
 * a scope glob that froze a node, `tpm` beaten by leaving out `max_tokens`,
 * a revoked key's queued requests that still ran, a burst of key writes the
 * nodes disagreed on under one version, terminal escapes in `viiwork top`,
 * names outside a scope, a bad percent-encoding that reset the connection,
 * and a `since` past any date.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { waitFor } from '../fakes/wait.ts';
import { call, openPost } from '../helpers/http.ts';
import { startMeshNode, stopAll, type MeshNode } from '../helpers/mesh.ts';
import { tempDir } from '../helpers/node.ts';

const ADMIN = `adm-${crypto.randomBytes(12).toString('hex')}`;
const sha = (s: string) => crypto.createHash('sha256').update(s).digest('hex');
const auth = (key: string) => ({ authorization: `Bearer ${key}` });
const BIN = path.resolve('bin/viiwork.js');
/** C0, DEL and C1 but line feeds. */
const CONTROL = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/;

describe('a shared fleet against its own key holders (issue 46)', () => {
  const nodes: MeshNode[] = [];
  let a: MeshNode;
  let b: MeshNode;
  let c: MeshNode;

  const addKey = async (node: MeshNode, body: Record<string, unknown>) => {
    const r = await call(`${node.url}/v1/keys`, 'POST', auth(ADMIN), body);
    assert.equal(r.status, 201, r.text);
    return r.json.key as string;
  };
  /** The key known on every node: it answers /v1/models there. */
  const everywhere = (key: string) =>
    waitFor(async () => (await Promise.all(nodes.map(async (n) => (await call(`${n.url}/v1/models`, 'GET', auth(key))).status))).every((s) => s === 200), {
      timeoutMs: 10_000,
      what: 'the key known on every node',
    });

  before(async () => {
    const env = { VIIWORK_MESH_SECRET: crypto.randomBytes(32).toString('base64') };
    const keysFile = path.join(tempDir('viiwork-hostile-'), 'keys.yaml');
    fs.writeFileSync(keysFile, `keys:\n  - name: ops\n    sha256: ${sha(ADMIN)}\n    role: admin\n`, { mode: 0o600 });
    // `long` answers 4,000 tokens when nothing bounds it, on a context of 8,192; `slow` has one slot a node and is slow.
    const models = [
      { name: 'long', engine: 'sim', parallel: 4, context: 8192, sim: { ttft_ms: 1, prefill_ms_per_1k: 1, tokens_per_s: 1_000_000, output_tokens: 4000 } },
      { name: 'slow', engine: 'sim', parallel: 1, context: 2048, sim: { ttft_ms: 1, prefill_ms_per_1k: 1, tokens_per_s: 5, output_tokens: 600 } },
    ];
    const aliases = { chat: { target: 'long', fallbacks: ['secret-model', 'slow'] }, hidden: { target: 'secret-model' } };
    nodes.push((a = await startMeshNode({ name: 'A', ip: '127.0.46.1', env, api: { keys_file: keysFile }, models, aliases })));
    nodes.push((b = await startMeshNode({ name: 'B', ip: '127.0.46.2', env, api: { keys_file: keysFile }, models, aliases, seeds: [a.gossip] })));
    nodes.push((c = await startMeshNode({ name: 'C', ip: '127.0.46.3', env, api: { keys_file: keysFile }, models, aliases, seeds: [a.gossip] })));
    await waitFor(
      async () => {
        const fleet = await call(`${a.url}/v1/fleet/capacity`, 'GET', auth(ADMIN));
        return fleet.json?.models?.find((m: any) => m.name === 'slow')?.hosts.filter((h: any) => h.fresh).length === 3;
      },
      { timeoutMs: 20_000, what: 'three hosts of slow seen from A' },
    );
  });
  after(() => stopAll(nodes));

  it('a backtracking scope glob: the request answers at once and /health answers throughout', async () => {
    const glob = `${'*a'.repeat(28)}*b`;
    const key = await addKey(a, { name: 'globber', models: [glob, '*-*-*-*-instruct'] });
    await everywhere(key);
    let healthMax = 0;
    let healthFailed = 0;
    let running = true;
    const health = (async () => {
      while (running) {
        const t0 = performance.now();
        const r = await request(`${a.url}/health`, { headersTimeout: 10_000 }).catch(() => undefined);
        await r?.body.dump();
        if (r?.statusCode !== 200) healthFailed++;
        healthMax = Math.max(healthMax, performance.now() - t0);
        await new Promise((res) => setTimeout(res, 20));
      }
    })();
    const name = 'a'.repeat(255);
    const t0 = performance.now();
    const answers = await Promise.all([
      call(`${a.url}/v1/chat/completions`, 'POST', auth(key), { model: name, messages: [{ role: 'user', content: 'hi' }] }),
      call(`${a.url}/v1/chat/completions`, 'POST', auth(key), { model: `${'-'.repeat(200)}x`, messages: [{ role: 'user', content: 'hi' }] }),
      call(`${a.url}/v1/models`, 'GET', auth(key)),
      call(`${a.url}/v1/models/${name}`, 'GET', auth(key)),
    ]);
    const took = performance.now() - t0;
    running = false;
    await health;
    assert.equal(answers[0].status, 403, answers[0].text);
    assert.equal(answers[0].json.error.code, 'model_not_allowed');
    assert.equal(answers[1].status, 403);
    assert.equal(answers[2].status, 200);
    assert.deepEqual(answers[2].json.data, [], 'neither glob matches a model of the mesh');
    assert.equal(answers[3].status, 403, 'GET /v1/models/{id} outside the scope');
    console.log(`# the four hostile-glob requests took ${took.toFixed(0)} ms; /health's slowest answer meanwhile ${healthMax.toFixed(0)} ms`);
    // Before: minutes, with /health unanswered (the node had to be killed). A bound for a loaded machine, not a benchmark.
    assert.ok(took < 5000, `took ${took.toFixed(0)} ms`);
    assert.equal(healthFailed, 0);
  });

  it('tpm holds for requests that set no output bound: twelve at once through three entries stay within the limit', async () => {
    const TPM = 3000;
    const key = await addKey(b, { name: 'unbounded', limits: { tpm: TPM } });
    await everywhere(key);
    const ask = (node: MeshNode, extra: Record<string, unknown>) => call(`${node.url}/v1/chat/completions`, 'POST', auth(key), { model: 'long', messages: [{ role: 'user', content: 'write a long story' }], ...extra });
    const burst = await Promise.all([a, b, c].flatMap((n, i) => Array.from({ length: 4 }, (_, j) => ask(n, (i + j) % 2 ? {} : { max_tokens: 0 }))));
    const served = burst.filter((r) => r.status === 200).reduce((n, r) => n + r.json.usage.total_tokens, 0);
    // Before: 9 of 12 admitted, 36,063 tokens in one minute. Each holds its whole context (8,192), more than the limit.
    assert.ok(served <= TPM, `${served} tokens served under tpm ${TPM}: ${burst.map((r) => r.status).join(',')}`);
    const refused = burst.find((r) => r.status === 429)!;
    assert.ok(refused, 'some were refused');
    assert.equal(refused.headers['x-viiwork-limit'], 'tpm');
    assert.match(refused.json.error.message, /max_tokens/, 'the refusal says how to hold less');
    // A bound the limit allows is served: the key works.
    const honest = await ask(a, { max_tokens: 100 });
    assert.equal(honest.status, 200, honest.text);
    assert.equal(honest.json.usage.completion_tokens, 100);
  });

  it('revoking a key fails its queued requests with 401 on every entry, before any slot frees', async () => {
    const hog = await addKey(a, { name: 'hog', models: ['slow'] });
    const victim = await addKey(a, { name: 'victim', models: ['slow'] });
    await everywhere(hog);
    await everywhere(victim);
    // Every slot of `slow` (one a node) taken by a stream held open.
    const held = [];
    for (const n of [a, b, c]) {
      const s = await openPost(`${n.url}/v1/chat/completions?host=${n.name}`, auth(hog), { model: 'slow', stream: true, messages: [{ role: 'user', content: 'go on' }] });
      assert.equal(s.status, 200);
      held.push(s);
    }
    try {
      const queued = [a, b, c].flatMap((n) => Array.from({ length: 3 }, () => call(`${n.url}/v1/chat/completions`, 'POST', auth(victim), { model: 'slow', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] })));
      let answered = 0;
      for (const q of queued) void q.then(() => answered++);
      await waitFor(
        async () => {
          const depths = await Promise.all([a, b, c].map(async (n) => (await call(`${n.url}/v1/fleet/capacity`, 'GET', auth(ADMIN))).json.models.find((m: any) => m.name === 'slow').hosts.find((h: any) => h.node === n.name).queued ?? 0));
          return depths.every((d) => d >= 3);
        },
        { timeoutMs: 10_000, what: 'three of the victim’s requests queued on each entry' },
      );
      assert.equal(answered, 0);
      const t0 = performance.now();
      assert.equal((await call(`${b.url}/v1/keys/victim`, 'DELETE', auth(ADMIN))).status, 200);
      const answers = await Promise.race([Promise.all(queued), new Promise<never>((_, reject) => setTimeout(() => reject(new Error('the queued requests still wait')), 15_000))]);
      const took = performance.now() - t0;
      console.log(`# all nine queued requests of the revoked key answered within ${took.toFixed(0)} ms of the DELETE`);
      for (const r of answers) {
        assert.equal(r.status, 401, r.text);
        assert.match(r.json.error.message, /revoked/);
      }
    } finally {
      for (const s of held) await s.close();
    }
  });

  it('a burst of 1,000 key writes through three nodes converges to one table: same version, digest and keys', async () => {
    const N = 999;
    const t0 = performance.now();
    const nodesW = [a, b, c];
    // 20 writers per node, 333 keys each node.
    await Promise.all(
      nodesW.flatMap((n, i) =>
        Array.from({ length: 20 }, async (_, w) => {
          for (let k = w; k < N / 3; k += 20) {
            const r = await call(`${n.url}/v1/keys`, 'POST', auth(ADMIN), { name: `burst-${i}-${k}`, models: ['long'] });
            assert.equal(r.status, 201, r.text);
          }
        }),
      ),
    );
    const wrote = performance.now();
    const state = async (n: MeshNode) => {
      const keys = await call(`${n.url}/v1/keys`, 'GET', auth(ADMIN));
      const cap = await call(`${n.url}/v1/capacity`, 'GET', {});
      return { names: keys.json.keys.map((k: any) => `${k.name}@${k.version}`).sort().join(','), count: keys.json.keys.filter((k: any) => k.name.startsWith('burst-')).length, version: cap.json.key_version, digest: cap.json.key_digest };
    };
    const states = await waitFor(
      async () => {
        const s = await Promise.all(nodesW.map(state));
        return s.every((x) => x.count === N && x.names === s[0].names && x.version === s[0].version && x.digest === s[0].digest) ? s : undefined;
      },
      { timeoutMs: 20_000, intervalMs: 200, what: 'three identical key tables' },
    );
    const converged = performance.now();
    console.log(`# ${N} keys written through three nodes in ${(wrote - t0).toFixed(0)} ms; identical tables ${(converged - wrote).toFixed(0)} ms after the last write`);
    assert.match(states[0].digest, /^[0-9a-f]{16}$/);
    // The documented bound (docs/api.md, "One table"): 10 s after the last write.
    assert.ok(converged - wrote < 10_000, `${(converged - wrote).toFixed(0)} ms`);
  });

  it('names outside a scope: fallbacks left out, and a model outside it answers as one that does not exist', async () => {
    const key = await addKey(c, { name: 'scoped', models: ['long', 'slow', 'chat', 'h*', 'nope*'] });
    await everywhere(key);
    const list = await call(`${c.url}/v1/aliases`, 'GET', auth(key));
    assert.equal(list.status, 200);
    assert.deepEqual(
      list.json.data.map((x: any) => [x.alias, x.target, x.fallbacks]),
      [['chat', 'long', ['slow']]],
    );
    const history = await call(`${c.url}/v1/aliases/history`, 'GET', auth(key));
    assert.doesNotMatch(history.text, /secret-model/);
    const one = await call(`${c.url}/v1/models/chat`, 'GET', auth(key));
    assert.equal(one.status, 200);
    assert.deepEqual(one.json.fallbacks, ['slow']);
    const models = await call(`${c.url}/v1/models`, 'GET', auth(key));
    assert.doesNotMatch(models.text, /secret-model/);
    // Outside the scope, a model that exists and one that does not answer alike (before: 403 and 404).
    const outside = await call(`${c.url}/v1/models/secret-model`, 'GET', auth(key));
    const outsideAbsent = await call(`${c.url}/v1/models/zz-no-such-model`, 'GET', auth(key));
    assert.deepEqual([outside.status, outside.json.error.code], [403, 'model_not_allowed']);
    assert.deepEqual([outsideAbsent.status, outsideAbsent.json.error.code], [403, 'model_not_allowed']);
    assert.equal((await call(`${c.url}/v1/models/nope-model`, 'GET', auth(key))).status, 404, 'inside the scope, absent is 404');
    // An alias in scope whose target is not: refused, naming the alias, never its target.
    const hidden = await call(`${c.url}/v1/chat/completions`, 'POST', auth(key), { model: 'hidden', max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] });
    assert.deepEqual([hidden.status, hidden.json.error.code], [403, 'model_not_allowed'], hidden.text);
    assert.doesNotMatch(hidden.text, /secret-model/);
    const hiddenModel = await call(`${c.url}/v1/models/hidden`, 'GET', auth(key));
    assert.equal(hiddenModel.status, 403);
    assert.doesNotMatch(hiddenModel.text, /secret-model/);
  });

  it('per-key series in /metrics: one’s own to a user key, none without a key, every key’s to an admin', async () => {
    const key = await addKey(a, { name: 'metered', models: ['long'] });
    await everywhere(key);
    assert.equal((await call(`${a.url}/v1/chat/completions`, 'POST', auth(key), { model: 'long', max_tokens: 3, messages: [{ role: 'user', content: 'hi' }] })).status, 200);
    const scrape = async (headers: Record<string, string> = {}) => (await request(`${a.url}/metrics`, { headers })).body.text();
    await waitFor(async () => /viiwork_key_requests_total\{key="metered"/.test(await scrape(auth(ADMIN))), { what: 'metered in /metrics' });
    const admin = await scrape(auth(ADMIN));
    assert.match(admin, /viiwork_key_requests_total\{key="unbounded"/, 'an admin sees every key');
    const own = await scrape(auth(key));
    assert.match(own, /viiwork_key_requests_total\{key="metered"/);
    assert.doesNotMatch(own, /^viiwork_key_\w+\{key="(?!metered")/m);
    assert.doesNotMatch(await scrape(), /^viiwork_key_\w+\{/m);
  });

  it('a bad percent-encoding answers 400 (with a key) or 401 (forward headers without a valid set), never a reset', async () => {
    const r = await call(`${a.url}/v1/timeline/%E0%A4%A`, 'GET', auth(ADMIN));
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.code, 'invalid_timeline_id');
    const forged = await call(`${a.url}/v1/timeline/%E0%A4%A`, 'GET', { 'x-viiwork-node': 'B' });
    assert.equal(forged.status, 401, forged.text);
    assert.equal(forged.headers['content-type'], 'application/json');
  });

  it('`since` past any date: 400 from /v1/usage and a clear message from viiwork usage', async () => {
    const huge = '9'.repeat(400);
    const r = await call(`${a.url}/v1/usage?since=${huge}`, 'GET', auth(ADMIN));
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.code, 'invalid_usage_query');
    const cli = await runCli(['usage', '--since', huge, '--url', a.url], { VIIWORK_API_KEY: ADMIN });
    assert.equal(cli.code, 1);
    assert.match(cli.stderr, /since .* is past any date/);
    assert.doesNotMatch(cli.stderr, /Invalid time value/);
    // One meaning for `since` (issue 44): /v1/history's `-1h` is the last hour on /v1/usage and in the CLI too.
    for (const form of ['-1h', '1h']) {
      const u = await call(`${a.url}/v1/usage?since=${form}`, 'GET', auth(ADMIN));
      assert.equal(u.status, 200, u.text);
      assert.ok(Math.abs(u.json.since - (Date.now() - 3_600_000)) < 60_000, `${form}: since ${u.json.since}`);
      const h = await call(`${a.url}/v1/history?since=${form}&series=requests`, 'GET', auth(ADMIN));
      assert.equal(h.status, 200, h.text);
    }
    const cliHour = await runCli(['usage', '--since', '-1h', '--url', a.url, '--json'], { VIIWORK_API_KEY: ADMIN });
    assert.equal(cliHour.code, 0, cliHour.stderr);
  });

  it('viiwork top prints a client’s model name with escapes as text, never as terminal control', async () => {
    const key = await addKey(a, { name: 'painter' });
    await everywhere(key);
    const evil = '\u001b]0;pwned\u0007\u001b[31mred\u001b[2K\r\u009bforged\u007f';
    const r = await call(`${a.url}/v1/chat/completions`, 'POST', auth(key), { model: evil, messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(r.status, 404);
    const feed = await waitFor(async () => (await call(`${a.url}/v1/decisions`, 'GET', auth(ADMIN))).json.data.find((d: any) => d.model === evil), { what: 'the evil name in the decision feed' });
    assert.ok(feed);
    const top = await runCli(['top', '--url', a.url, '--interval', '5s'], { VIIWORK_API_KEY: ADMIN }, (out) => out.includes('RECENT REQUESTS') && out.includes('forged'));
    assert.match(top.stdout, /\\x1b\]0;pwned\\x07\\x1b\[31mred\\x1b\[2K\\x0d\\x9bforged\\x7f/);
    assert.doesNotMatch(top.stdout, CONTROL);
  });
});

/** Run the CLI; with `until`, stop it once its output satisfies that (a view that redraws until stopped). */
function runCli(args: string[], env: Record<string, string>, until?: (stdout: string) => boolean): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [BIN, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    const timer = setTimeout(() => {
      p.kill('SIGKILL');
      reject(new Error(`viiwork ${args[0]} did not finish: ${stdout}${stderr}`));
    }, 30_000);
    p.stdout.on('data', (d) => {
      stdout += d;
      if (until?.(stdout)) p.kill('SIGTERM');
    });
    p.stderr.on('data', (d) => (stderr += d));
    p.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}
