/**
 * Issue 12, acceptance 5 (and issue 9: "a node that joins with the wrong
 * secret logs nothing itself, only the seed warns"): a node whose join is
 * refused for another label, another secret or the other mesh mode says so
 * in its own log, naming the seed's address, within its first join attempt
 * — before it reports ready, with the next attempt 10 minutes away — and
 * the seed warns about the joiner. The lines come from memberlist on the
 * gossip thread, through the node's log.
 *
 * Real `viiwork serve` processes on 127.0.43.x.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { waitFor } from '../fakes/wait.ts';
import { getJson, startMeshNode, stopAll, type MeshNode } from '../helpers/mesh.ts';

const secret = () => crypto.randomBytes(32).toString('base64');
/** One join attempt only: the rejoin loop's next round is far beyond the test. */
const once = { rejoin_interval: '10m' };

/** The joiner's warning, logged before its `ready:` line (so by its first join attempt). */
function warnedBeforeReady(node: MeshNode, line: RegExp): string {
  const lines = node.logs().split('\n');
  const warned = lines.findIndex((l) => / WARN  /.test(l) && line.test(l));
  const ready = lines.findIndex((l) => /\bready: /.test(l));
  assert.ok(ready >= 0, `${node.name} never logged ready:\n${node.logs()}`);
  assert.ok(warned >= 0 && warned < ready, `${node.name} should warn ${line} before it is ready; its log:\n${node.logs()}`);
  return lines[warned];
}

async function members(node: MeshNode): Promise<string[]> {
  return (await getJson<{ members: { name: string }[] }>(`${node.url}/v1/mesh`)).members.map((m) => m.name);
}

describe('a join refused for a mismatch is a warning on the joining node', () => {
  const meshSecret = secret();
  let seed: MeshNode;
  let openSeed: MeshNode;
  const joiners: MeshNode[] = [];
  before(async () => {
    seed = await startMeshNode({ name: 'seed', ip: '127.0.43.1', env: { VIIWORK_MESH_SECRET: meshSecret }, mesh: once });
    openSeed = await startMeshNode({ name: 'open-seed', ip: '127.0.43.5', mesh: once });
  });
  after(() => stopAll([seed, openSeed, ...joiners]));

  it('another secret: the joiner names the seed it cannot decrypt, the seed names the joiner', async () => {
    const j = await startMeshNode({ name: 'other-secret', ip: '127.0.43.2', env: { VIIWORK_MESH_SECRET: secret() }, seeds: [seed.gossip], mesh: once });
    joiners.push(j);
    const line = warnedBeforeReady(j, /gossip from 127\.0\.43\.1 could not be decrypted: it uses another VIIWORK_MESH_SECRET/);
    assert.doesNotMatch(line, /undefined|a peer/);
    await waitFor(() => /gossip from 127\.0\.43\.2 could not be decrypted/.test(seed.logs()), { what: 'the seed warns about the joiner' });
    assert.deepEqual(await members(j), ['other-secret']);
  });

  it('another label: the joiner names the seed that closed the stream, the seed names the joiner and both labels', async () => {
    const j = await startMeshNode({ name: 'other-label', ip: '127.0.43.4', env: { VIIWORK_MESH_SECRET: meshSecret }, seeds: [seed.gossip], mesh: { ...once, label: 'not-viiwork' } });
    joiners.push(j);
    warnedBeforeReady(j, /mesh\.label differs: 127\.0\.43\.1:7946 closed the stream without answering: it probably uses another label \(this node's label: "not-viiwork"\)/);
    await waitFor(() => /mesh\.label differs: a stream from 127\.0\.43\.4:\d+ has label "not-viiwork", this node's is "viiwork-v2"/.test(seed.logs()), {
      what: 'the seed warns about the joiner',
    });
    assert.deepEqual(await members(j), ['other-label']);
  });

  it('an open node joining a secured mesh, and a secured node joining an open one: each joiner names the seed and the fix', async () => {
    const open = await startMeshNode({ name: 'open-joiner', ip: '127.0.43.3', seeds: [seed.gossip], mesh: once });
    joiners.push(open);
    warnedBeforeReady(open, /mesh mode mismatch: encrypted gossip from 127\.0\.43\.1, but this node is open \(mesh\.open\); give it the mesh's VIIWORK_MESH_SECRET/);
    await waitFor(() => /mesh mode mismatch: plaintext gossip from 127\.0\.43\.3, but this node is secured/.test(seed.logs()), { what: 'the secured seed warns' });

    const secured = await startMeshNode({ name: 'secured-joiner', ip: '127.0.43.6', env: { VIIWORK_MESH_SECRET: meshSecret }, seeds: [openSeed.gossip], mesh: once });
    joiners.push(secured);
    warnedBeforeReady(secured, /mesh mode mismatch: plaintext gossip from 127\.0\.43\.5, but this node is secured \(VIIWORK_MESH_SECRET\)/);
    await waitFor(() => /mesh mode mismatch: encrypted gossip from 127\.0\.43\.6, but this node is open/.test(openSeed.logs()), { what: 'the open seed warns' });
    assert.deepEqual(await members(open), ['open-joiner']);
    assert.deepEqual(await members(secured), ['secured-joiner']);
  });
});
