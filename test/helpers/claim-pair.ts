/**
 * Two members of a secured mesh for tests of a forward's claims: `exec`, with
 * a sim model `m` of `parallel` slots (told to the engine as id_slot, so the
 * executor knows exactly what each holds), and `entry`, the member the
 * forwards come from (a forward's sender must be alive in the mesh). The
 * test signs its own forwards as `entry`, with the claims it chooses.
 */
import crypto from 'node:crypto';
import { request } from 'undici';
import { RequestSigner } from '../../src/security/signing.ts';
import { startMeshNode, waitConverged, type MeshNode } from './mesh.ts';

export interface ClaimPair {
  exec: MeshNode;
  entry: MeshNode;
  /** A chat completion signed as a forward from `entry` to `exec`, with `claims` (X-Viiwork-Claims) when given. */
  forward(body: string, claims?: string): Promise<{ status: number; refused?: string; text: string }>;
}

/** The pair on `127.0.<net>.1` (entry) and `.2` (exec). */
export async function startClaimPair(net: number, parallel: number): Promise<ClaimPair> {
  const secret = crypto.randomBytes(32).toString('base64');
  const signer = new RequestSigner(Buffer.from(secret, 'base64'));
  const exec = await startMeshNode({
    name: 'exec',
    ip: `127.0.${net}.2`,
    env: { VIIWORK_MESH_SECRET: secret },
    models: [{ name: 'm', engine: 'sim', parallel, sim: { ttft_ms: 1, prefill_ms_per_1k: 1, tokens_per_s: 2000, output_tokens: 2 } }],
  });
  const entry = await startMeshNode({ name: 'entry', ip: `127.0.${net}.1`, env: { VIIWORK_MESH_SECRET: secret }, seeds: [exec.gossip] });
  await waitConverged([entry, exec]);
  const forward = async (body: string, claims?: string) => {
    const sha = crypto.createHash('sha256').update(body).digest('hex');
    const headers = signer.sign({ method: 'POST', pathWithQuery: '/v1/chat/completions', node: 'entry', to: 'exec', bodySha256: sha, claims });
    const r = await request(`${exec.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
    const refused = r.headers['x-viiwork-refused'];
    return { status: r.statusCode, refused: typeof refused === 'string' ? refused : undefined, text: await r.body.text() };
  };
  return { exec, entry, forward };
}
