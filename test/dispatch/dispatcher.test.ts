/**
 * Issue 8, acceptance 4, with the real dispatcher: the events that wake a
 * waiting request. One entry node in this process with fake ports (its
 * slots, one member's report), a fake engine and a fake member over real
 * HTTP; no capacity poller and no 250 ms tick, so only the event under test
 * can place the waiting request.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { Agent, request } from 'undici';
import { DecisionFeed } from '../../src/dispatch/decisions.ts';
import { Dispatcher } from '../../src/dispatch/dispatcher.ts';
import type { DispatchPorts } from '../../src/dispatch/ports.ts';
import type { Reservation } from '../../src/dispatch/types.ts';
import type { Backend } from '../../src/engines/backend.ts';
import type { Lease } from '../../src/engines/targets.ts';
import { ForwardBook } from '../../src/forward/book.ts';
import { sendError, ApiError } from '../../src/http/errors.ts';
import { Metrics } from '../../src/metrics/metrics.ts';
import { QueueSet } from '../../src/queue/fifo.ts';
import type { HostView } from '../../src/route/types.ts';
import { startFakeEngine, type FakeEngine } from '../fakes/fake-engine.ts';
import { waitFor } from '../fakes/wait.ts';
import { entryServer } from '../helpers/entry-server.ts';

const CHAT = { workloads: ['chat', 'completion'], audio: false };
const silent = { info() {}, warn() {}, error() {}, debug() {} };

function listen(server: http.Server): Promise<string> {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${(server.address() as AddressInfo).port}`)));
}

describe('the dispatcher wakes a waiting request on the event that frees room', () => {
  let engine: FakeEngine;
  let member: FakeEngine;
  let entry: http.Server;
  let url: string;
  const state = { localSlots: 0, localBusy: 0, remoteSlots: 1, remoteBusy: 0, polledAt: 0 };
  let queues: QueueSet<Reservation>;
  let forwards: ForwardBook;
  const agent = new Agent();

  before(async () => {
    engine = await startFakeEngine({ name: 'local', outputTokens: 2 });
    member = await startFakeEngine({ name: 'member-B', outputTokens: 2 });
    queues = new QueueSet<Reservation>(64, 5000);
    forwards = new ForwardBook();
    const backend = { id: 'm/0', url: engine.url, reportFailure() {}, authHeaders: () => ({}) } as unknown as Backend;
    const ports: DispatchPorts = {
      name: 'A',
      rules: { queueMax: 64, queueTimeoutMs: 5000, forwardRetry: 1, performance: false, streamStallMs: 60_000, writeStallMs: 60_000, prefixAffinity: true },
      now: Date.now,
      random: Math.random,
      nextRoundRobin: () => 0,
      warming: () => undefined,
      waiting: () => {},
      snapshot: (): HostView[] => [
        { name: 'A', local: true, rttMs: 0, fresh: true, polledAt: Date.now(), models: new Map([['m', { targets: [{ descriptor: CHAT, slots: state.localSlots, busy: state.localBusy }], slots: state.localSlots, busy: state.localBusy }]]) },
        { name: 'B', local: false, rttMs: 1, fresh: true, polledAt: state.polledAt, models: new Map([['m', { targets: [{ descriptor: CHAT, slots: state.remoteSlots, busy: state.remoteBusy }], slots: state.remoteSlots, busy: state.remoteBusy }]]) },
      ],
      slots: {
        does: () => true,
        tryLease: (): Lease | undefined => {
          if (state.localBusy >= state.localSlots) return undefined;
          state.localBusy++;
          let released = false;
          return {
            backend,
            target: { model: 'm', descriptor: CHAT, backends: [backend] },
            grantedAt: performance.now(),
            release() {
              if (released) return;
              released = true;
              state.localBusy--;
              queues.pumpAll();
            },
          };
        },
      },
      forwards,
      queues,
      aliases: { get: () => undefined },
      peers: { self: 'A', signsBody: false, apiOf: (h) => (h === 'B' ? member.url : undefined), quietSince: () => () => false, sign: () => ({}), dispatcher: agent },
      recordScore() {},
      metrics: new Metrics(),
      decisions: new DecisionFeed(),
      log: silent,
    };
    const dispatcher = new Dispatcher(ports);
    entry = entryServer(dispatcher);
    url = await listen(entry);
  });
  after(async () => {
    entry.close();
    await engine.close();
    await member.close();
    await agent.close();
  });

  const ask = (query = '') =>
    request(`${url}/v1/chat/completions${query}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"model":"m","messages":[]}' }).then(async (r) => ({
      status: r.statusCode,
      node: r.headers['x-viiwork-node'],
      route: r.headers['x-viiwork-route'],
      text: await r.body.text(),
    }));

  it('placed on a forward’s end: the slot it held on the member counts as free at once', async () => {
    Object.assign(state, { localSlots: 0, localBusy: 0, remoteSlots: 1, remoteBusy: 0, polledAt: Date.now() - 10 });
    member.hold();
    const first = ask();
    await waitFor(() => member.heldCount === 1, { what: 'first forward held on B' });
    const second = ask();
    await waitFor(() => queues.depth('m') === 1, { what: 'second request queued' });
    member.hold(false); // the first forward ends; no report, no tick
    const [r1, r2] = await Promise.all([first, second]);
    assert.equal(r1.status, 200);
    assert.equal(r2.status, 200, r2.text);
    assert.equal(r2.node, 'B');
    assert.equal(r2.route, 'queued');
    assert.equal(forwards.inFlightCount, 0);
  });

  it('waits, then is placed on a local slot release', async () => {
    Object.assign(state, { localSlots: 1, localBusy: 0, remoteSlots: 1, remoteBusy: 1, polledAt: Date.now() });
    engine.hold();
    const first = ask();
    await waitFor(() => engine.heldCount === 1, { what: 'local slot busy' });
    const second = ask();
    await waitFor(() => queues.depth('m') === 1, { what: 'second request queued' });
    engine.hold(false);
    const [r1, r2] = await Promise.all([first, second]);
    assert.equal(r1.node, 'A');
    assert.equal(r2.status, 200, r2.text);
    assert.equal(r2.node, 'A');
  });

  it('a pinned head that cannot be placed does not block the request behind it', async () => {
    Object.assign(state, { localSlots: 1, localBusy: 0, remoteSlots: 1, remoteBusy: 1, polledAt: Date.now() });
    engine.hold();
    const occupying = ask();
    await waitFor(() => engine.heldCount === 1, { what: 'local slot busy' });
    const pinned = ask('?host=B');
    await waitFor(() => queues.depth('m') === 1, { what: 'pinned request queued' });
    const behind = ask();
    await waitFor(() => queues.depth('m') === 2, { what: 'second request queued behind it' });
    engine.hold(false); // the local slot frees: the head (pinned to full B) is passed over
    const r = await behind;
    assert.equal(r.status, 200, r.text);
    assert.equal(r.node, 'A');
    assert.equal(queues.depth('m'), 1, 'the pinned request still waits for B');
    await occupying;
    state.remoteBusy = 0;
    state.polledAt = Date.now();
    queues.pumpAll(); // a report arrives: B has room
    const p = await pinned;
    assert.equal(p.status, 200, p.text);
    assert.equal(p.node, 'B');
  });
});
