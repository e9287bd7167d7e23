/**
 * Issue 17: routing is cache placement (SPEC section 9, step 6). Tables over
 * the pure pricing, the decision, the wait for a warm host and what a host
 * holds: a warm slow host beats a cold fast one when its price says so; a
 * full warm home is waited for when it pays and not when it does not; ties
 * go to the session's ranking, then this node, then the prefix ranking;
 * shared system prompts meet; the same snapshot gives the same decision on
 * every entry node.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { RecentRoutes } from '../../src/dispatch/entry/recent-routes.ts';
import { scanJsonObject } from '../../src/http/json-scan.ts';
import type { PrefixChain } from '../../src/prompt/held.ts';
import { decide } from '../../src/route/decide.ts';
import { holdStep, NO_HOLD } from '../../src/route/hold.ts';
import { walkPrompt } from '../../src/prompt/chain.ts';
import { BAND, price, WAIT_WEIGHT } from '../../src/route/price.ts';
import { rendezvousRank } from '../../src/hashing/rendezvous.ts';
import type { Candidate, Decision, HostView, RouteOptions, RouteRequest } from '../../src/route/types.ts';
import { warmCandidates } from '../../src/route/warmth.ts';
import { seeded } from '../helpers/random.ts';

function cand(host: string, over: Partial<Candidate> = {}): Candidate {
  return { host, local: false, fresh: true, healthy: true, loading: false, free: 1, rttMs: 0, bestTarget: 'chat,completion', overheadMs: 100, ratePer1k: 100, ...over };
}
const req = (over: Partial<RouteRequest> = {}): RouteRequest => ({ model: 'm', workload: 'chat', promptTokens: 4000, prefer: [], ...over });
const opts = (over: Partial<RouteOptions> = {}): RouteOptions => ({ performance: true, random: seeded(3), roundRobin: 0, ...over });
const where = (d: Decision) => (d.kind === 'run' ? `${d.host}/${d.reason}` : d.host ? `wait:${d.host}` : 'wait');

describe('pricing by the prefill a host would really do', () => {
  it('prices wait + overhead + rate × uncached tokens + RTT', () => {
    const [a, b, c] = price(
      [cand('a', { cached: 3000, rttMs: 5 }), cand('b', { free: 0, releaseMs: 50, cached: 4000 }), cand('c', { free: 0, cached: 9999 })],
      4000,
    )!;
    assert.deepEqual([a.service, a.wait, a.prediction, a.score, a.cached], [205, 0, 205, 205, 3000]);
    assert.deepEqual([b.service, b.wait, b.prediction, b.score], [100, 50, 150, 100 + WAIT_WEIGHT * 50]);
    // No release time of its own: the median of those reported; cached never above the prompt.
    assert.deepEqual([c.wait, c.cached], [50, 4000]);
    // Requests this node already sent or holds for a full host start there first.
    const [d] = price([cand('d', { free: 0, releaseMs: 50, ahead: 2 })], 0)!;
    assert.equal(d.wait, 150);
    // Nobody reports a release time: the host's own service time stands in for one.
    const [e] = price([cand('e', { free: 0 })], 1000)!;
    assert.equal(e.wait, 200);
  });

  const table: { name: string; cands: Candidate[]; tokens: number; want: string }[] = [
    {
      name: 'a warm slow host beats a cold fast one when its price says so',
      cands: [cand('slow', { ratePer1k: 200, cached: 3500 }), cand('fast', { ratePer1k: 60 })],
      tokens: 4000, // slow: 100 + 200 × 0.5 = 200; fast: 100 + 60 × 4 = 340
      want: 'slow/scored',
    },
    {
      name: 'but not when it holds too little',
      cands: [cand('slow', { ratePer1k: 200, cached: 1000 }), cand('fast', { ratePer1k: 60 })],
      tokens: 4000, // slow: 700; fast: 340
      want: 'fast/scored',
    },
    {
      name: 'a full warm home is waited for when it pays',
      cands: [cand('home', { free: 0, releaseMs: 100, cached: 3900 }), cand('cold')],
      tokens: 4000, // home: 110 + 3 × 100 = 410; cold: 500
      want: 'wait:home',
    },
    {
      name: 'and not when its wait costs more than it saves',
      cands: [cand('home', { free: 0, releaseMs: 300, cached: 3900 }), cand('cold')],
      tokens: 4000, // home: 110 + 3 × 300 = 1010
      want: 'cold/scored',
    },
    {
      name: 'nor when this node already sent or holds others for it',
      cands: [cand('home', { free: 0, releaseMs: 100, cached: 3900, ahead: 1 }), cand('cold')],
      tokens: 4000, // wait 200: 110 + 600 = 710
      want: 'cold/scored',
    },
    {
      name: 'nor when the saving is within the tie band',
      cands: [cand('home', { free: 0, releaseMs: 10, cached: 4000 }), cand('cold', { cached: 3800 })],
      tokens: 4000, // home: 100 + 3 × 10 = 130; cold: 120
      want: 'cold/scored',
    },
  ];
  for (const t of table) it(t.name, () => assert.equal(where(decide(t.cands, req({ promptTokens: t.tokens }), opts())), t.want));

  it('holds a full warm host for at most the time it saves (weighed), then prices again without waiting for it', () => {
    const cands = [cand('home', { free: 0, releaseMs: 100, cached: 3900 }), cand('cold')];
    const d = decide(cands, req(), opts());
    assert.deepEqual(d, { kind: 'wait', host: 'home', holdMs: (500 - 110) / WAIT_WEIGHT });
    const at = (now: number, s = NO_HOLD) => holdStep(s, (x) => decide(cands, req(x), opts()), now);
    const until = 1000 + (500 - 110) / WAIT_WEIGHT;
    const s1 = at(1000);
    assert.deepEqual(s1.state.hold, { host: 'home', until });
    assert.equal(s1.wakeAt, until);
    // Still waiting a little later: the deadline set when the wait began stands.
    const s2 = at(1100, s1.state);
    assert.equal(s2.decision.kind, 'wait');
    assert.deepEqual(s2.state.hold, { host: 'home', until });
    // At the deadline it runs on the best free host and is never held for home again.
    const s3 = at(until, s2.state);
    assert.equal(where(s3.decision), 'cold/scored');
    assert.deepEqual(s3.state, { passed: ['home'], since: 1000 });
    // With no free host at all it waits for home without a deadline (any freed slot reprices it).
    const none = holdStep(NO_HOLD, (x) => decide([cands[0], cand('busy', { free: 0, releaseMs: 1000 })], req(x), opts()), 0);
    assert.deepEqual([where(none.decision), none.wakeAt, none.state.hold?.until], ['wait:home', undefined, Infinity]);
  });

  it('a second warm full host waited for after the first shares its clock: the saving over the free host is spent once', () => {
    // home saves (500 - 110) / 3 = 130 ms of weighed wait over cold; second (cached 3850) about as much.
    const cands = [cand('home', { free: 0, releaseMs: 100, cached: 3900 }), cand('second', { free: 0, releaseMs: 100, cached: 3850 }), cand('cold')];
    const at = (now: number, s = NO_HOLD) => holdStep(s, (x) => decide(cands, req(x), opts()), now);
    const s1 = at(1000);
    assert.equal(s1.state.hold?.host, 'home');
    // home's hold runs out: second would save about as much, but that time has been waited already.
    const s2 = at(s1.wakeAt!, s1.state);
    assert.equal(where(s2.decision), 'cold/scored', 'the request runs on the free host instead of waiting for a second full one');
    assert.deepEqual(s2.state.passed, ['home', 'second']);
    // Waited for alone, second is held for what it saves, from then on.
    const alone = holdStep(NO_HOLD, (x) => decide(cands.slice(1), req(x), opts()), s1.wakeAt!);
    assert.equal(where(alone.decision), 'wait:second');
  });

  it('breaks ties by the session ranking first, then this node, then the prefix ranking, then a draw', () => {
    const names = ['a', 'b', 'c', 'd'];
    const even = (local?: string) => names.map((h) => cand(h, { local: h === local, overheadMs: h === 'd' ? 300 : 100 }));
    const band = names.slice(0, 3);
    const sessionTop = rendezvousRank('s', names).find((h) => band.includes(h))!;
    const prefixTop = rendezvousRank('p:x', names).find((h) => band.includes(h))!;
    const local = band.find((h) => h !== sessionTop && h !== prefixTop)!;
    assert.equal(where(decide(even(local), req({ sessionKey: 's', prefixKey: 'p:x' }), opts())), `${sessionTop}/session`);
    assert.equal(where(decide(even(local), req({ prefixKey: 'p:x' }), opts())), `${local}/local`);
    assert.equal(where(decide(even(), req({ prefixKey: 'p:x' }), opts())), `${prefixTop}/prefix`);
    const drawn = new Set<string>();
    const random = seeded(9);
    for (let i = 0; i < 200; i++) drawn.add(where(decide(even(), req(), opts({ random }))));
    assert.deepEqual([...drawn].sort(), ['a/scored', 'b/scored', 'c/scored']);
    // Outside the band (d is 3× dearer) the session's ranking does not reach.
    const dFirst = ['s0', 's1', 's2', 's3', 's4', 's5', 's6', 's7', 's8', 's9'].find((k) => rendezvousRank(k, names)[0] === 'd')!;
    assert.notEqual((decide(even(), req({ sessionKey: dFirst }), opts()) as { host: string }).host, 'd');
  });

  it('gives the same decision from every entry node for the same snapshot (session and warm cache alike)', () => {
    const names = ['a', 'b', 'c'];
    for (let k = 0; k < 30; k++) {
      const chosen = new Set<string>();
      for (const entry of names) {
        const cands = names.map((h) => cand(h, { local: h === entry, cached: h === 'b' ? 100 : 0, rttMs: h === entry ? 0 : 1 }));
        chosen.add(where(decide([...cands].reverse(), req({ sessionKey: `s${k}` }), opts())));
      }
      assert.equal(chosen.size, 1, `session s${k}: ${[...chosen]}`);
    }
    // A host holding most of the prompt wins from everywhere, this node or not.
    for (const entry of ['a', 'b', 'c']) {
      const cands = ['a', 'b', 'c'].map((h) => cand(h, { local: h === entry, cached: h === 'c' ? 3500 : 0 }));
      assert.equal(where(decide(cands, req({ prefixKey: 'p:y' }), opts())).split('/')[0], 'c');
    }
  });

  it('carries the cached tokens it predicted in the decision', () => {
    const d = decide([cand('a', { cached: 1234 }), cand('b')], req(), opts());
    assert.deepEqual([d.kind === 'run' && d.host, d.kind === 'run' && d.predictedCached], ['a', 1234]);
  });

  it('uses the tie band of SPEC (10%)', () => assert.equal(BAND, 1.1));
});

function chainOf(messages: unknown[]): PrefixChain {
  const body = Buffer.from(JSON.stringify({ model: 'm', messages }));
  const s = scanJsonObject(body);
  assert.ok(s.ok);
  return walkPrompt(body, s.object, 'chat').chain;
}

const SYSTEM = { role: 'system', content: 'You are the shared assistant. '.repeat(200) };
const chatTarget = (over: Record<string, unknown> = {}) => ({ descriptor: { workloads: ['chat', 'completion'], audio: false }, slots: 2, busy: 0, ...over });
function host(name: string, over: Partial<HostView> = {}, target = chatTarget()): HostView {
  return { name, local: false, rttMs: 1, fresh: true, polledAt: 1000, models: new Map([['m', { targets: [target], slots: 2, busy: 0 }]]), ...over };
}

describe('what a host holds: its digest and this node’s own recent routes', () => {
  it('a request just sent counts at once, so conversations sharing a system prompt meet', () => {
    let now = 2000;
    const routes = new RecentRoutes(() => now);
    const hosts = [host('a'), host('b'), host('c')];
    const cands = hosts.map((h) => cand(h.name));
    const first = chainOf([SYSTEM, { role: 'user', content: 'first conversation' }]);
    const second = chainOf([SYSTEM, { role: 'user', content: 'another one' }]);
    // The first conversation has a session key that sends it where its ranking says.
    const d1 = decide(warmCandidates(cands, { hosts, model: 'm', workload: 'chat', chain: first, memory: routes }), req({ sessionKey: 'conv-1', promptTokens: first.at(-1)!.tokens }), opts());
    assert.equal(d1.kind, 'run');
    const home = (d1 as { host: string }).host;
    routes.record(home, 'm', first);
    now += 10;
    // The second, another conversation with another session key, finds the system prompt there.
    const warm = warmCandidates(cands, { hosts, model: 'm', workload: 'chat', chain: second, memory: routes });
    assert.deepEqual(
      warm.map((c) => c.cached),
      hosts.map((h) => (h.name === home ? second[0].tokens : 0)),
    );
    // Without a session key (a session key has a home of its own, SPEC 9.6), it goes where the system prompt is.
    const d2 = decide(warm, req({ promptTokens: second.at(-1)!.tokens }), opts());
    assert.equal(where(d2), `${home}/scored`);
  });

  it('a forward the host sent back is forgotten: the host is not priced warm for the prompt it never ran', () => {
    let now = 2000;
    const routes = new RecentRoutes(() => now);
    const hosts = [host('a'), host('b')];
    const cands = hosts.map((h) => cand(h.name));
    const chain = chainOf([SYSTEM, { role: 'user', content: 'a new task' }]);
    const sent = routes.record('a', 'm', chain)!;
    now += 5;
    const cachedAt = () => warmCandidates(cands, { hosts, model: 'm', workload: 'chat', chain, memory: routes }).map((c) => c.cached);
    // Placed there a moment ago: the whole prompt counts as held at a (a retry would go straight back).
    assert.deepEqual(cachedAt(), [chain.at(-1)!.tokens, 0]);
    // a refused it (full, or its slot would evict a live conversation): it holds nothing of it.
    sent.end('refused');
    assert.deepEqual(cachedAt(), [0, 0]);
    // A route that ran stays counted after it ends.
    routes.record('b', 'm', chain)!.end('served');
    assert.deepEqual(cachedAt(), [0, chain.at(-1)!.tokens]);
  });

  it('a digest says what a host holds; this node’s routes older than that digest’s poll no longer count', () => {
    let now = 5000;
    const routes = new RecentRoutes(() => now);
    const chain = chainOf([SYSTEM, { role: 'user', content: 'q' }]);
    routes.record('a', 'm', chain);
    const c = [cand('a'), cand('b')];
    const digest = { version: 1, held: new Map([[chain[0].hash, chain[0].tokens]]) };
    const inputs = (hosts: HostView[]) => ({ hosts, model: 'm', workload: 'chat', chain, memory: routes });
    // A report polled before the route: the route counts (the whole prompt).
    assert.equal(warmCandidates(c, inputs([host('a', { polledAt: 4000 }, chatTarget({ digest })), host('b')]))[0].cached, chain[1].tokens);
    // Polled after it: the digest knows, and says only the system prompt is held.
    now = 7000;
    assert.equal(warmCandidates(c, inputs([host('a', { polledAt: 6000 }, chatTarget({ digest })), host('b')]))[0].cached, chain[0].tokens);
    // This node's own record is exact and never pruned by a poll.
    const local = warmCandidates([cand('a', { local: true })], inputs([host('a', { local: true, polledAt: 7000 })]));
    assert.equal(local[0].cached, chain[1].tokens);
  });

  it('what only a busy slot holds counts when the host is full, not when a free slot would take the request', () => {
    const routes = new RecentRoutes(() => 0);
    const running = chainOf([SYSTEM, { role: 'user', content: 'running now' }]);
    const other = chainOf([SYSTEM, { role: 'user', content: 'another conversation' }]);
    const followUp = chainOf([SYSTEM, { role: 'user', content: 'running now' }, { role: 'assistant', content: 'ok' }, { role: 'user', content: 'next' }]);
    // The executor marks the running request's links short of its last as busy (engines/cache-model.ts).
    const digest = { version: 2, held: new Map(running.map((l) => [l.hash, l.tokens])), busy: new Set([running[0].hash]) };
    const at = (free: number, chain: PrefixChain) =>
      warmCandidates([cand('a', { free })], { hosts: [host('a', { polledAt: 1 }, chatTarget({ digest }))], model: 'm', workload: 'chat', chain, memory: routes })[0].cached;
    assert.equal(at(1, other), 0, 'a free slot takes it: the shared system prompt in the busy slot is not there');
    assert.equal(at(0, other), running[0].tokens, 'full: it waits, and may get that slot');
    assert.equal(at(1, followUp), running[1].tokens, 'the running request’s next turn finds its whole prompt');
  });

  it('a request of this node that ended after the digest was polled counts again: that digest shows its slot busy', () => {
    let now = 1000;
    const routes = new RecentRoutes(() => now);
    const sent = chainOf([SYSTEM, { role: 'user', content: 'first' }]);
    const next = chainOf([SYSTEM, { role: 'user', content: 'second conversation' }]);
    const handle = routes.record('a', 'm', sent)!;
    // Polled at 1100 while it ran: the digest marks the shared system prompt busy.
    const digest = { version: 3, held: new Map(sent.map((l) => [l.hash, l.tokens])), busy: new Set([sent[0].hash]) };
    const cached = () =>
      warmCandidates([cand('a')], { hosts: [host('a', { polledAt: 1100 }, chatTarget({ digest }))], model: 'm', workload: 'chat', chain: next, memory: routes })[0].cached;
    now = 1200;
    assert.equal(cached(), 0, 'still running: the digest is right, a free slot would take it cold');
    handle.end('served');
    assert.equal(cached(), next[0].tokens, 'ended after the poll: its slot is free and holds the system prompt');
  });

  it('looks only at as many recent routes as the host has slots (a slot holds one prompt)', () => {
    const routes = new RecentRoutes(() => 0);
    const chain = chainOf([{ role: 'user', content: 'mine' }]);
    routes.record('a', 'm', chain);
    routes.record('a', 'm', chainOf([{ role: 'user', content: 'other 1' }]));
    assert.equal(routes.held('a', 'm', chain, -Infinity, 2), chain[0].tokens);
    routes.record('a', 'm', chainOf([{ role: 'user', content: 'other 2' }]));
    assert.equal(routes.held('a', 'm', chain, -Infinity, 2), 0);
  });

  it('counts requests this node holds for a host as ahead of this one', () => {
    const routes = new RecentRoutes(() => 0);
    const out = warmCandidates([cand('a', { free: 0, ahead: 1 }), cand('b')], {
      hosts: [host('a'), host('b')],
      model: 'm',
      workload: 'chat',
      chain: [],
      memory: routes,
      holding: (h) => (h === 'a' ? 2 : 0),
    });
    assert.deepEqual(
      out.map((c) => c.ahead),
      [3, undefined],
    );
  });
});
