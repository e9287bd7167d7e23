/**
 * A member that leaves and comes back under the same name (a restart) is a
 * new process: the answer to a poll its old process got before it went must
 * not become the new one's report. Found in CI: the old process, draining,
 * answered a poll after the mesh had forgotten it; the restarted node then
 * looked draining to its gateway for a second and a session's turn left its
 * home. Real HTTP: a fake member whose answer the test releases.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, describe, it } from 'node:test';
import { CapacityPoller } from '../../src/capacity/poller.ts';

const report = (draining: boolean) => ({
  node: 'b',
  models: [{ name: 'tiny', slots: 1, busy: 0, targets: [{ workloads: ['chat'], slots: 1, busy: 0 }] }],
  ...(draining ? { draining: true } : {}),
});

describe('the capacity poller across a member’s restart', () => {
  let release: (() => void) | undefined;
  let draining = true;
  let asked = 0;
  const server = http.createServer((_req, res) => {
    asked++;
    const answer = () => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(report(draining)));
    if (draining) release = answer;
    else answer();
  });
  const poller = new CapacityPoller({ intervalMs: 60_000 });
  after(async () => {
    await poller.stop();
    server.closeAllConnections();
    server.close();
  });

  it('drops the answer to a poll sent before the member was forgotten, and keeps the next process’s', async () => {
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const target = { name: 'b', api: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
    poller.setTargets([target]);
    const old = poller.poll(target);
    const deadline = Date.now() + 10_000;
    while (!release && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    assert.ok(release, 'the member was asked');
    // The member leaves while the poll is in flight; its old process answers afterwards, draining.
    poller.forget('b');
    release();
    await old;
    assert.equal(poller.get('b'), undefined, 'the old process’s answer was kept as the member’s report');

    // The member comes back: its new process's answer is its report.
    draining = false;
    await poller.poll(target);
    assert.equal(asked, 2);
    const r = poller.get('b');
    assert.ok(r, 'the new process’s report was dropped');
    assert.equal(r.report.draining, undefined);
    assert.equal(r.report.models[0].slots, 1);
  });
});
