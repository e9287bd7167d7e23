/**
 * Issue 17 with the real dispatcher: waiting for a warm host (SPEC section
 * 9, step 6). One entry node in this process with fake ports: a free local
 * slot that holds nothing of the prompt, and a member B whose report shows
 * it full but holding the whole prompt in its cache digest. The request
 * waits for B — and runs there when B's slot frees — or, when B stays full,
 * runs here once its wait stops paying, woken by nothing but its own
 * deadline (no poller, no tick, no report).
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
import { scanJsonObject } from '../../src/http/json-scan.ts';
import { sendError, ApiError } from '../../src/http/errors.ts';
import { Metrics } from '../../src/metrics/metrics.ts';
import { QueueSet } from '../../src/queue/fifo.ts';
import { prefixChain } from '../../src/prompt/chain.ts';
import { WAIT_WEIGHT } from '../../src/route/price.ts';
import type { HostView } from '../../src/route/types.ts';
import { startFakeEngine, type FakeEngine } from '../fakes/fake-engine.ts';
import { waitFor } from '../fakes/wait.ts';
import { entryServer } from '../helpers/entry-server.ts';

const CHAT = { workloads: ['chat', 'completion'], audio: false };
const silent = { info() {}, warn() {}, error() {}, debug() {} };
/** About 4,000 tokens: 400 ms of prefill here at 100 ms per 1k, nothing on B, which holds it. */
const BODY = JSON.stringify({ model: 'm', messages: [{ role: 'system', content: 'p'.repeat(16_000) }, { role: 'user', content: 'go on' }] });
const RELEASE_MS = 20;
const SCORES = { overheadMs: 10, ratePer1k: 100 };

function listen(server: http.Server): Promise<string> {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${(server.address() as AddressInfo).port}`)));
}

describe('the dispatcher waits for a full host whose cache holds the prompt, as long as that pays', () => {
  let engine: FakeEngine;
  let member: FakeEngine;
  let entry: http.Server;
  let url: string;
  const state = { remoteBusy: 1, polledAt: 0 };
  let queues: QueueSet<Reservation>;
  const agent = new Agent();
  const scan = scanJsonObject(Buffer.from(BODY));
  assert.ok(scan.ok);
  const chain = prefixChain(Buffer.from(BODY), scan.object, 'chat');
  const digest = { version: 1, held: new Map(chain.map((l) => [l.hash, l.tokens])) };

  before(async () => {
    engine = await startFakeEngine({ name: 'local', outputTokens: 2 });
    member = await startFakeEngine({ name: 'member-B', outputTokens: 2 });
    queues = new QueueSet<Reservation>(64, 5000);
    const backend = { id: 'm/0', url: engine.url, reportFailure() {}, authHeaders: () => ({}) } as unknown as Backend;
    let localBusy = 0;
    const ports: DispatchPorts = {
      name: 'A',
      rules: { queueMax: 64, queueTimeoutMs: 5000, forwardRetry: 1, performance: true, streamStallMs: 60_000, writeStallMs: 60_000, prefixAffinity: true },
      now: Date.now,
      random: () => 0.99, // never explores
      nextRoundRobin: () => 0,
      warming: () => undefined,
      waiting: () => {},
      snapshot: (): HostView[] => [
        { name: 'A', local: true, rttMs: 0, fresh: true, polledAt: Date.now(), models: new Map([['m', { targets: [{ descriptor: CHAT, slots: 1, busy: localBusy }], slots: 1, busy: localBusy, ...SCORES }]]) },
        {
          name: 'B',
          local: false,
          rttMs: 1,
          fresh: true,
          polledAt: state.polledAt,
          models: new Map([
            ['m', { targets: [{ descriptor: CHAT, slots: 1, busy: state.remoteBusy, digest, ...(state.remoteBusy ? { releaseMs: RELEASE_MS } : {}) }], slots: 1, busy: state.remoteBusy, ...SCORES }],
          ]),
        },
      ],
      slots: {
        does: () => true,
        tryLease: (): Lease | undefined => {
          if (localBusy >= 1) return undefined;
          localBusy++;
          let released = false;
          return {
            backend,
            target: { model: 'm', descriptor: CHAT, backends: [backend] },
            grantedAt: performance.now(),
            release() {
              if (released) return;
              released = true;
              localBusy--;
              queues.pumpAll();
            },
          };
        },
      },
      forwards: new ForwardBook(),
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

  const ask = () =>
    request(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: BODY }).then(async (r) => ({
      status: r.statusCode,
      node: r.headers['x-viiwork-node'],
      route: r.headers['x-viiwork-route'],
      text: await r.body.text(),
    }));

  it('waits for the warm full host and runs there when its slot frees', async () => {
    Object.assign(state, { remoteBusy: 1, polledAt: Date.now() });
    const r = ask();
    await waitFor(() => queues.depth('m') === 1, { what: 'the request waiting for B' });
    // B's next report: its slot is free.
    Object.assign(state, { remoteBusy: 0, polledAt: Date.now() });
    queues.pumpAll();
    const out = await r;
    assert.equal(out.status, 200, out.text);
    assert.equal(out.node, 'B');
    assert.equal(out.route, 'queued');
  });

  it('runs on the free cold host once the wait has cost what it saves, woken by its own deadline', async () => {
    Object.assign(state, { remoteBusy: 1, polledAt: Date.now() });
    const t0 = Date.now();
    const out = await ask();
    const waited = Date.now() - t0;
    assert.equal(out.status, 200, out.text);
    assert.equal(out.node, 'A');
    // Here: 10 + 100 × tokens/1000; on B: 10 + 1 (RTT). It waited (here − B) ÷ WAIT_WEIGHT.
    const tokens = chain[chain.length - 1].tokens;
    const holdMs = (10 + (100 * tokens) / 1000 - 11) / WAIT_WEIGHT;
    assert.ok(waited >= holdMs - 5, `waited ${waited} ms of a ${holdMs.toFixed(0)} ms hold`);
    assert.ok(waited < holdMs + 2000, `waited ${waited} ms`);
  });
});
