/**
 * Who a forward is taken from (SPEC 6), by the real judge behind a real HTTP
 * server, the member table fed as gossip feeds it. Secured mesh: a signed
 * forward from a member that is alive or merely suspect (a probe answered late
 * on a loaded machine) is a forward; from a dead, left, foreign or unknown
 * name, 401 naming why. Open mesh: only the alive member, from its address.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { judgeForward } from '../../src/forward/verify.ts';
import { ApiError } from '../../src/http/errors.ts';
import { MemberTable, type MemberState } from '../../src/mesh/members.ts';
import { encodeMeta } from '../../src/mesh/meta.ts';
import { loadMeshMode } from '../../src/security/secret.ts';
import { RequestSigner } from '../../src/security/signing.ts';

const secret = crypto.randomBytes(32).toString('base64');

/** A server answering every POST with the judge's verdict: 200 {sender} or the error's status and message. */
async function judgeServer(open: boolean, members: MemberTable): Promise<{ url: string; close: () => Promise<void> }> {
  const mode = loadMeshMode(open ? {} : { VIIWORK_MESH_SECRET: secret }, open);
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      judgeForward(req, Buffer.concat(chunks), mode, members, () => {}, 'exec').then(
        (sender) => res.writeHead(200).end(JSON.stringify(sender)),
        (err: unknown) => res.writeHead(err instanceof ApiError ? err.status : 500).end(err instanceof Error ? err.message : String(err)),
      );
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => new Promise<void>((r) => server.close(() => r())) };
}

function table(states: Record<string, MemberState | 'foreign'>): MemberTable {
  const t = new MemberTable('exec');
  t.update(
    Object.entries(states).map(([name, state]) => ({
      name,
      addr: '127.0.0.1',
      port: 7946,
      meta: state === 'foreign' ? Buffer.from('serf') : encodeMeta({ api: 8080, ver: '0.9.0', role: 'node' }),
      state: state === 'foreign' ? 'alive' : state,
    })),
  );
  return t;
}

const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] });

async function send(url: string, headers: Record<string, string>): Promise<{ status: number; text: string }> {
  const r = await request(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
  return { status: r.statusCode, text: await r.body.text() };
}

describe('a forward is taken from a live member (SPEC 6)', () => {
  const members = table({ alive: 'alive', suspect: 'suspect', dead: 'dead', left: 'left', serf: 'foreign' });
  const signer = new RequestSigner(Buffer.from(secret, 'base64'));
  const signed = (node: string): Record<string, string> => ({ ...signer.sign({ method: 'POST', pathWithQuery: '/v1/chat/completions', node, to: 'exec', bodySha256: crypto.createHash('sha256').update(body).digest('hex') }) });
  let secured: Awaited<ReturnType<typeof judgeServer>>;
  let open: Awaited<ReturnType<typeof judgeServer>>;
  before(async () => {
    secured = await judgeServer(false, members);
    open = await judgeServer(true, members);
  });
  after(async () => {
    await secured.close();
    await open.close();
  });

  it('secured: signed by an alive or a suspect member, a forward; by a dead, left, foreign or unknown one, 401 saying which', async () => {
    for (const node of ['alive', 'suspect']) {
      const r = await send(secured.url, signed(node));
      assert.equal(r.status, 200, `${node}: ${r.text}`);
      assert.deepEqual({ ...JSON.parse(r.text), claims: undefined }, { kind: 'forward', from: node, claims: undefined });
    }
    for (const [node, why] of [['dead', 'dead'], ['left', 'left'], ['serf', 'foreign'], ['stranger', 'unknown']]) {
      const r = await send(secured.url, signed(node));
      assert.equal(r.status, 401, `${node}: ${r.text}`);
      assert.match(r.text, new RegExp(`"${node}" is not a live member \\(${why}\\)`));
    }
    assert.equal((await send(secured.url, {})).status, 200, 'no forward headers: a client');
  });

  it('open: only the alive member, from its address; a suspect one is refused until it refutes', async () => {
    const alive = await send(open.url, { 'x-viiwork-node': 'alive' });
    assert.equal(alive.status, 200, alive.text);
    assert.equal(JSON.parse(alive.text).from, 'alive');
    const suspect = await send(open.url, { 'x-viiwork-node': 'suspect' });
    assert.equal(suspect.status, 401);
    assert.match(suspect.text, /not an alive member \(suspect\)/);
  });
});
