/**
 * Issue 28, item 7: a pin, or a refusal, is decided on a fresh report.
 * Three secured nodes, each polling members it does not route to only in
 * the background (far beyond this test). pf-a has the GGUF of an on-demand
 * model; pf-c, the entry, polls pf-b when it joins, when pf-b serves
 * nothing. Then pf-b gains an on-demand entry for the model (`fetch: mesh`,
 * no file: a SIGHUP), after pf-c's last poll of it. A request entering pf-c
 * pinned to pf-b polls pf-b first (SPEC 7's first-request poll) and is
 * placed there: pf-b fetches the file from pf-a, loads and answers, instead
 * of pf-c answering 404 from what it knew.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { parse, stringify } from 'yaml';
import { FAKE_LLAMA_SERVER } from '../fakes/fake-engine.ts';
import { writeTinyGguf } from '../fakes/tiny-gguf.ts';
import { waitFor } from '../fakes/wait.ts';
import { getJson, startSeeded, stopAll, type MeshNode } from '../helpers/mesh.ts';
import { tempDir } from '../helpers/node.ts';

const IP = (n: number) => `127.0.228.${n}`;
/** Far longer than this test runs: no background poll can refresh what pf-c knows of pf-b. */
const mesh = { capacity_background: '600s', capacity_interest: '10m' };
const routing = { load_wait: '120s', queue_timeout: '120s' };

type Fleet = { models: { name: string; hosts: { node: string }[] }[] };
const hostsOf = async (n: MeshNode, model: string) => (await getJson<Fleet>(`${n.url}/v1/fleet/capacity`)).models.find((m) => m.name === model)?.hosts.map((h) => h.node) ?? [];

/** The age in seconds of `n`'s report of `member` (viiwork_capacity_report_age_seconds). */
async function reportAge(n: MeshNode, member: string): Promise<number> {
  const text = await (await request(`${n.url}/metrics`)).body.text();
  const m = new RegExp(`^viiwork_capacity_report_age_seconds\\{member="${member}"\\} (\\S+)$`, 'm').exec(text);
  return m ? Number(m[1]) : -1;
}

describe('a pin decided on a fresh report of the pinned member', () => {
  const secret = crypto.randomBytes(32).toString('base64');
  const env = { VIIWORK_MESH_SECRET: secret };
  const dir = tempDir('vw-pin-fresh-');
  fs.mkdirSync(path.join(dir, 'a'));
  const file = writeTinyGguf(path.join(dir, 'a', 'tiny.gguf'), { seed: 28 });
  const entry = { name: 'late', engine: 'llamacpp', load: 'on_demand', memory: '64MiB', workloads: ['chat'], llamacpp: { binary: FAKE_LLAMA_SERVER } };
  const nodes: MeshNode[] = [];
  let b: MeshNode, c: MeshNode;

  before(async () => {
    await startSeeded(nodes, [
      { name: 'pf-a', ip: IP(1), env, mesh, routing, models: [{ ...entry, path: file }] },
      { name: 'pf-b', ip: IP(2), env, mesh, routing, node: { models_dir: path.join(dir, 'b', 'models'), memory_budget: '1GiB' } },
      { name: 'pf-c', ip: IP(3), env, mesh, routing },
    ]);
    [, b, c] = nodes;
  });
  after(async () => {
    await stopAll(nodes);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('a pin to a member whose model appeared after the entry polled it is routed there, not answered 404', async () => {
    await waitFor(async () => (await hostsOf(c, 'late')).includes('pf-a'), { what: 'pf-c sees late on pf-a', timeoutMs: 30_000 });
    // pf-b gains the entry (no file here: it would fetch it from pf-a) after pf-c polled it.
    const doc = parse(fs.readFileSync(b.config, 'utf8'));
    doc.models = [{ ...entry, fetch: 'mesh', path: path.join(dir, 'b', 'absent', 'tiny.gguf') }];
    fs.writeFileSync(b.config, stringify(doc));
    b.proc.kill('SIGHUP');
    await waitFor(async () => (await hostsOf(b, 'late')).includes('pf-b'), { what: 'pf-b offers late', timeoutMs: 30_000 });
    // pf-c's report of pf-b predates the entry, unless pf-c happened to poll pf-b in the moment since (the same
    // unexplained poll as below): then it knows already, and the pin below must still be routed there.
    const seen = await hostsOf(c, 'late');
    assert.ok(seen.includes('pf-a'), `pf-c still sees late on pf-a (${seen.join(', ')})`);
    if (seen.includes('pf-b')) console.log('# pf-c polled pf-b after its SIGHUP: the first-request poll is not exercised in this run');
    // Usually it also grows older than stale_after (3 s), as a member polled in the background looks between its polls.
    // Sometimes pf-c keeps polling pf-b (a held poll; not yet explained, see the session 10 note): its report
    // stays fresh but still lacks the model, and the pin must be routed there all the same.
    const stale = await waitFor(async () => (await reportAge(c, 'pf-b')) > 3.5, { what: "pf-c's report of pf-b stale", timeoutMs: 10_000, intervalMs: 250 }).then(
      () => true,
      () => false,
    );
    // A stale report that still lacks the model is the case this test is for; a fresh one may have learnt it meanwhile.
    if (stale) assert.deepEqual(await hostsOf(c, 'late'), ['pf-a']);

    const r = await request(`${c.url}/v1/chat/completions?host=pf-b`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'late', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
      headersTimeout: 150_000,
      bodyTimeout: 150_000,
    });
    const text = await r.body.text();
    assert.equal(r.statusCode, 200, text);
    assert.equal(r.headers['x-viiwork-node'], 'pf-b');
    assert.match(b.logs(), /fetched \S*tiny\.gguf \(\d+ bytes, sha256 verified\) from pf-a/);
  });

  it('a pin to a name no member has, or a model nobody serves, is still refused at once', async () => {
    const ask = async (pathQ: string, model: string) => {
      const r = await request(`${c.url}${pathQ}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] }) });
      return { status: r.statusCode, body: JSON.parse(await r.body.text()) };
    };
    const nobody = await ask('/v1/chat/completions?host=pf-z', 'late');
    assert.equal(nobody.status, 404);
    assert.equal(nobody.body.error.code, 'host_not_found');
    const unknown = await ask('/v1/chat/completions', 'no-such-model');
    assert.equal(unknown.status, 404);
    assert.equal(unknown.body.error.code, 'model_not_found');
  });
});
