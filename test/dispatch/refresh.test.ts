/**
 * Issue 28, item 7, with the real dispatcher: a request that would be
 * refused up front on a stale report asks the node to poll first
 * (`refresh`), then decides on the new snapshot. One entry node in this
 * process with fake ports; member B is a fake engine over real HTTP whose
 * report gains the model only when it is polled again.
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
import { ForwardBook } from '../../src/forward/book.ts';
import { Metrics } from '../../src/metrics/metrics.ts';
import { QueueSet } from '../../src/queue/fifo.ts';
import type { HostModelView, HostView } from '../../src/route/types.ts';
import { startFakeEngine, type FakeEngine } from '../fakes/fake-engine.ts';
import { entryServer } from '../helpers/entry-server.ts';

const CHAT = { workloads: ['chat', 'completion'], audio: false };
const silent = { info() {}, warn() {}, error() {}, debug() {} };
const served = (): HostModelView => ({ targets: [{ descriptor: CHAT, slots: 1, busy: 0 }], slots: 1, busy: 0 });

describe('the entry polls stale members before it refuses', () => {
  let member: FakeEngine;
  let entry: http.Server;
  let url: string;
  const agent = new Agent();
  /** What B's last report says, and what a poll of B would say now. */
  const b = { polled: new Map<string, HostModelView>([['known', served()]]), now: new Map<string, HostModelView>([['known', served()], ['late', served()]]), polledAt: 0 };
  const refreshes: (string | undefined)[] = [];

  before(async () => {
    member = await startFakeEngine({ name: 'member-B', outputTokens: 2 });
    const ports: DispatchPorts = {
      name: 'A',
      rules: { queueMax: 8, queueTimeoutMs: 2000, forwardRetry: 1, performance: false, streamStallMs: 60_000, writeStallMs: 60_000, prefixAffinity: false },
      now: Date.now,
      random: () => 0.99,
      nextRoundRobin: () => 0,
      warming: () => undefined,
      waiting: () => {},
      // B's report is stale until polled: it still routes (a stale host is a candidate for the checks), but says old things.
      snapshot: (): HostView[] => [{ name: 'B', local: false, rttMs: 1, fresh: Date.now() - b.polledAt < 3000, polledAt: b.polledAt, models: b.polled }],
      refresh: async (pin) => {
        refreshes.push(pin);
        if (Date.now() - b.polledAt < 3000) return false;
        b.polled = new Map(b.now);
        b.polledAt = Date.now();
        return true;
      },
      slots: { does: () => false, tryLease: () => undefined },
      forwards: new ForwardBook(),
      queues: new QueueSet<Reservation>(8, 2000),
      aliases: { get: () => undefined },
      peers: { self: 'A', signsBody: false, apiOf: (h) => (h === 'B' ? member.url : undefined), quietSince: () => () => false, sign: () => ({}), dispatcher: agent },
      recordScore() {},
      metrics: new Metrics(),
      decisions: new DecisionFeed(),
      log: silent,
    };
    const dispatcher = new Dispatcher(ports);
    entry = entryServer(dispatcher);
    await new Promise<void>((resolve) => entry.listen(0, '127.0.0.1', () => resolve()));
    url = `http://127.0.0.1:${(entry.address() as AddressInfo).port}`;
  });
  after(async () => {
    entry.close();
    await member.close();
    await agent.close();
  });

  const ask = async (model: string, query = '') => {
    const r = await request(`${url}/v1/chat/completions${query}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] }) });
    return { status: r.statusCode, node: r.headers['x-viiwork-node'], body: await r.body.text() };
  };

  it('a model only a stale report lacks: polled, then routed (no pin)', async () => {
    const r = await ask('late');
    assert.equal(r.status, 200, r.body);
    assert.equal(r.node, 'B');
    assert.deepEqual(refreshes, [undefined]);
  });

  it('a servable request asks for nothing; a refusal on a fresh report is not polled again', async () => {
    refreshes.length = 0;
    assert.equal((await ask('known')).status, 200);
    assert.deepEqual(refreshes, []);
    const r = await ask('nobody-serves-this');
    assert.equal(r.status, 404);
    assert.equal(JSON.parse(r.body).error.code, 'model_not_found');
    assert.deepEqual(refreshes, [undefined], 'asked once; the fresh report stands');
  });

  it('a pin asks about the pinned member', async () => {
    refreshes.length = 0;
    const r = await ask('late', '?host=C');
    assert.equal(r.status, 404);
    assert.equal(JSON.parse(r.body).error.code, 'host_not_found');
    assert.deepEqual(refreshes, ['C']);
  });
});
