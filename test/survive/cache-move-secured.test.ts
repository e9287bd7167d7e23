/**
 * Moving a cache (SPEC section 13) in a secured mesh: the calls that save a
 * slot for a member and ask a member to take one are members' only. An
 * unsigned request gets 403; a forged signature (another secret), or a
 * signature in the name of a node that is not a member, 401; a member's
 * signed request reaches the mover (404 here: no slot holds that link).
 * Nothing is saved or restored for the refused ones.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { RequestSigner } from '../../src/security/signing.ts';
import { startMeshNode, stopAll, waitConverged, type MeshNode } from '../helpers/mesh.ts';

const IP = (n: number) => `127.0.216.${n}`;

describe('cache moves in a secured mesh', () => {
  const secret = crypto.randomBytes(32);
  const signer = new RequestSigner(secret);
  const forged = new RequestSigner(crypto.randomBytes(32));
  let nodes: MeshNode[] = [];
  let a: MeshNode;

  before(async () => {
    const env = { VIIWORK_MESH_SECRET: secret.toString('base64') };
    const models = [{ name: 'sim', engine: 'sim', parallel: 1 }];
    a = await startMeshNode({ name: 'mv-a', ip: IP(1), env, models });
    const b = await startMeshNode({ name: 'mv-b', ip: IP(2), env, models, seeds: [a.gossip] });
    nodes = [a, b];
    await waitConverged(nodes);
  });
  after(() => stopAll(nodes));

  const post = async (p: string, headers: Record<string, string>, body: Buffer) => {
    const r = await request(`${a.url}${p}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
    return { status: r.statusCode, text: await r.body.text() };
  };
  const sign = (p: string, body: Buffer, s: RequestSigner, as: string): Record<string, string> => ({ ...s.sign({ method: 'POST', pathWithQuery: p, node: as, to: 'mv-a', bodySha256: crypto.createHash('sha256').update(body).digest('hex') }) });

  for (const p of ['/v1/slot-cache/save', '/v1/slot-cache/take']) {
    it(`${p}: unsigned 403, forged 401, a non-member's name 401, a member's signature reaches the mover`, async () => {
      const body = Buffer.from(JSON.stringify({ model: 'sim', link: '0123456789abcdef', tokens: 2000, fingerprint: { sha256: '0'.repeat(64), context: 4096, parallel: 1, args: [] } }));
      const unsigned = await post(p, {}, body);
      assert.equal(unsigned.status, 403, unsigned.text);
      const wrong = await post(p, sign(p, body, forged, 'mv-b'), body);
      assert.equal(wrong.status, 401, wrong.text);
      const stranger = await post(p, sign(p, body, signer, 'intruder'), body);
      assert.equal(stranger.status, 401, stranger.text);
      assert.match(stranger.text, /not a live member \(unknown\)/);
      // The body signed is the body read: another body under a member's signature is forged too.
      const swapped = await post(p, sign(p, Buffer.from('{}'), signer, 'mv-b'), body);
      assert.equal(swapped.status, 401, swapped.text);
      const member = await post(p, sign(p, body, signer, 'mv-b'), body);
      // A sim engine holds no llama-server slot: the save finds none; the take finds a free slot but its pull is refused.
      assert.ok(member.status === 404 || member.status === 409, member.text);
      const metrics = await (await request(`${a.url}/metrics`)).body.text();
      assert.doesNotMatch(metrics, /viiwork_cache_moves_total\{[^}]*outcome="moved"\} [1-9]/);
    });
  }
});
