/**
 * Claims across a real secured two-node mesh (signature v3): the entry node
 * tells the executor the prompt's prefix chain it walked, inside the
 * signature, and the executor's cache bookkeeping uses it instead of walking
 * the body again. A claim nobody signed — added to a v2 forward, altered on
 * its way, or sent by a client — changes nothing.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { decodeLinks } from '../../src/capacity/digest.ts';
import { RequestSigner } from '../../src/security/signing.ts';
import { getJson, startMeshNode, stopAll, waitConverged, waitModelOn, type MeshNode } from '../helpers/mesh.ts';

const IP = (n: number) => `127.0.121.${n}`;
const secret = crypto.randomBytes(32).toString('base64');
const env = { VIIWORK_MESH_SECRET: secret };
const signer = new RequestSigner(Buffer.from(secret, 'base64'));

function chatBody(text: string): string {
  return JSON.stringify({ model: 'm', messages: [{ role: 'user', content: text }] });
}

async function post(url: string, body: string, headers: Record<string, string>): Promise<{ status: number; text: string }> {
  const r = await request(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
  return { status: r.statusCode, text: await r.body.text() };
}

function signed(body: string, claims?: string): Record<string, string> {
  const sha = crypto.createHash('sha256').update(body).digest('hex');
  return { ...signer.sign({ method: 'POST', pathWithQuery: '/v1/chat/completions', node: 'entry', to: 'exec', bodySha256: sha, claims }) };
}

async function heldHashes(exec: MeshNode): Promise<Set<string>> {
  const report = await getJson(`${exec.url}/v1/capacity`);
  const target = report.models.find((m: { name: string }) => m.name === 'm').targets[0];
  const digest = target.digest?.links ? decodeLinks(target.digest.v, target.digest.links) : undefined;
  return new Set(digest ? digest.held.keys() : []);
}

describe('forward claims (signature v3)', () => {
  let entry: MeshNode, exec: MeshNode;
  before(async () => {
    exec = await startMeshNode({
      name: 'exec',
      ip: IP(2),
      env,
      models: [{ name: 'm', engine: 'sim', parallel: 1, sim: { ttft_ms: 1, prefill_ms_per_1k: 1, tokens_per_s: 2000, output_tokens: 2 } }],
    });
    entry = await startMeshNode({ name: 'entry', ip: IP(1), env, seeds: [exec.gossip] });
    await waitConverged([entry, exec]);
    await waitModelOn(entry, 'm', ['exec']);
  });
  after(() => stopAll([entry, exec]));

  it('a forward through the entry carries its chain, and the executor records it', async () => {
    const r = await request(`${entry.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: chatBody('through the entry') });
    assert.equal(r.statusCode, 200, await r.body.text());
    assert.equal(r.headers['x-viiwork-node'], 'exec');
    assert.ok((await heldHashes(exec)).size > 0, 'the executor holds the conversation it ran');
  });

  it("the executor's cache bookkeeping takes the signed chain, not a second walk of the body", async () => {
    const body = chatBody('a body whose own chain differs from the claim');
    const claimed = 'abcdef0123456789';
    const r = await post(exec.url, body, signed(body, `chain=${claimed}:3`));
    assert.equal(r.status, 200, r.text);
    assert.ok((await heldHashes(exec)).has(claimed), 'the claimed link is what the executor recorded');
  });

  it('a claims header beside a v2 signature is refused: a claim cannot be added on the way', async () => {
    const body = chatBody('v2 plus a claim');
    const r = await post(exec.url, body, { ...signed(body), 'x-viiwork-claims': 'chain=1111111111111111:3' });
    assert.equal(r.status, 401, r.text);
    assert.match(r.text, /outside the signature/);
  });

  it('a claim altered after signing is refused', async () => {
    const body = chatBody('altered claim');
    const r = await post(exec.url, body, { ...signed(body, 'chain=2222222222222222:3'), 'X-Viiwork-Claims': 'chain=3333333333333333:3' });
    assert.equal(r.status, 401, r.text);
    assert.match(r.text, /bad signature/);
  });

  it("a client's claims header is dropped: the request runs, and the executor walks the body itself", async () => {
    const bogus = '4444444444444444';
    const r = await post(exec.url, chatBody('a client trying to plant a link'), { 'x-viiwork-claims': `chain=${bogus}:3` });
    assert.equal(r.status, 200, r.text);
    const held = await heldHashes(exec);
    assert.ok(held.size > 0);
    assert.ok(!held.has(bogus), "a client's claim never reaches the cache bookkeeping");
  });

  it('a malformed claim inside a valid signature is refused with what is wrong', async () => {
    const body = chatBody('malformed');
    const r = await post(exec.url, body, signed(body, 'chain'));
    assert.equal(r.status, 401, r.text);
    assert.match(r.text, /malformed X-Viiwork-Claims/);
  });
});
