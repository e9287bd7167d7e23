import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { seeded } from '../helpers/random.ts';
import { candidates, forwardsIn } from '../../src/route/eligibility.ts';
import { checkServable } from '../../src/dispatch/servable.ts';
import { decide, weightedDraw } from '../../src/route/decide.ts';
import { price } from '../../src/route/price.ts';
import type { Candidate, HostModelView, HostView, RouteOptions, RouteRequest } from '../../src/route/types.ts';


function cand(host: string, over: Partial<Candidate> = {}): Candidate {
  return { host, local: false, fresh: true, healthy: true, loading: false, free: 1, rttMs: 0, bestTarget: 'chat,completion', ...over };
}

const req = (over: Partial<RouteRequest> = {}): RouteRequest => ({ model: 'm', workload: 'chat', promptTokens: 100, prefer: [], ...over });
const opts = (over: Partial<RouteOptions> = {}): RouteOptions => ({ performance: true, random: seeded(1), roundRobin: 0, ...over });

function tally(cands: Candidate[], r: RouteRequest, n: number, seed = 7) {
  const random = seeded(seed);
  const counts: Record<string, number> = {};
  const reasons: Record<string, number> = {};
  for (let i = 0; i < n; i++) {
    const d = decide(cands, r, { performance: true, random, roundRobin: i });
    assert.equal(d.kind, 'run');
    if (d.kind !== 'run') continue;
    counts[d.host] = (counts[d.host] ?? 0) + 1;
    reasons[d.reason] = (reasons[d.reason] ?? 0) + 1;
  }
  return { counts, reasons };
}

describe('routing decision', () => {
  it('runs locally when this node is in the band', () => {
    const cands = [cand('a', { local: true, overheadMs: 110 }), cand('b', { overheadMs: 100 })];
    assert.deepEqual(tally(cands, req(), 200).counts, { a: 200 });
  });

  it('leaves this node when it is slower than 1.10× the best', () => {
    const cands = [cand('a', { local: true, overheadMs: 130 }), cand('b', { overheadMs: 100 })];
    const { counts, reasons } = tally(cands, req(), 200);
    assert.deepEqual(counts, { b: 200 });
    assert.deepEqual(reasons, { scored: 200 });
  });

  it('draws over the band weighted by 1/prediction³', () => {
    const cands = [cand('a', { overheadMs: 100 }), cand('b', { overheadMs: 108 })];
    const n = 100_000;
    const { counts } = tally(cands, req({ promptTokens: 0 }), n);
    const wa = 1 / 100 ** 3;
    const wb = 1 / 108 ** 3;
    const expected = wa / (wa + wb);
    assert.ok(Math.abs(counts.a / n - expected) < 0.01, `a got ${counts.a / n}, expected ${expected}`);
  });

  it('explores a free unscored host 1 time in 20 (±1% over 100,000 draws)', () => {
    const cands = [cand('a', { overheadMs: 100 }), cand('new')];
    const n = 100_000;
    const { reasons } = tally(cands, req(), n);
    assert.ok(Math.abs(reasons.explore / n - 0.05) < 0.01, `explored ${reasons.explore / n}`);
  });

  it('never explores when a preference applies', () => {
    const cands = [cand('a', { overheadMs: 100, free: 0 }), cand('b', { overheadMs: 100 }), cand('new')];
    const { reasons } = tally(cands, req({ prefer: ['a'] }), 2000);
    assert.equal(reasons.explore, undefined);
  });

  it('prices an unscored host at the median prediction and fills missing parts with medians', () => {
    const cands = [cand('a', { overheadMs: 100, ratePer1k: 10 }), cand('b', { overheadMs: 300, ratePer1k: 30 }), cand('c', { overheadMs: 200 }), cand('d')];
    const p = price(cands, 1000)!;
    const by = Object.fromEntries(p.map((x: { c: Candidate; prediction: number }) => [x.c.host, x.prediction]));
    assert.equal(by.a, 110);
    assert.equal(by.b, 330);
    assert.equal(by.c, 220); // rate filled with the median of 10 and 30
    assert.equal(by.d, 220); // the median of 110, 330 and 220
  });

  it('adds RTT to remote predictions', () => {
    const cands = [cand('a', { overheadMs: 100, rttMs: 50 }), cand('b', { overheadMs: 120, rttMs: 0 })];
    const p = price(cands, 0)!;
    assert.deepEqual(p.map((x: { prediction: number }) => x.prediction), [150, 120]);
  });

  it('falls back to the most free host without scores, ties by RTT then round robin', () => {
    const cands = [cand('a', { free: 2, rttMs: 5 }), cand('b', { free: 3, rttMs: 9 }), cand('c', { free: 3, rttMs: 9 })];
    const seen = new Set<string>();
    for (let rr = 0; rr < 4; rr++) {
      const d = decide(cands, req(), opts({ roundRobin: rr }));
      assert.equal(d.kind === 'run' && d.reason, 'most-free');
      if (d.kind === 'run') seen.add(d.host);
    }
    assert.deepEqual([...seen].sort(), ['b', 'c']);
    const local = decide([...cands, cand('me', { local: true, free: 1 })], req(), opts());
    assert.equal(local.kind === 'run' && local.host, 'me');
  });

  it('ignores scores when routing.performance is false or the workload is not scored', () => {
    const cands = [cand('a', { overheadMs: 500, free: 4 }), cand('b', { overheadMs: 10, free: 1 })];
    assert.equal((decide(cands, req(), opts({ performance: false })) as { host: string }).host, 'a');
    assert.equal((decide(cands, req({ workload: 'embeddings' }), opts()) as { host: string }).host, 'a');
  });

  it('pins wait for a full host and never run elsewhere', () => {
    const cands = [cand('a', { free: 0 }), cand('b')];
    assert.deepEqual(decide(cands, req({ pin: 'a' }), opts()), { kind: 'wait' });
    assert.equal((decide(cands, req({ pin: 'b' }), opts()) as { reason: string }).reason, 'pinned');
  });

  it('takes the first preferred host with room, passing over unknown and full ones', () => {
    const cands = [cand('a', { free: 0 }), cand('b'), cand('c')];
    const d = decide(cands, req({ prefer: ['nosuch', 'a', 'c', 'b'] }), opts());
    assert.deepEqual([d.kind === 'run' && d.host, d.kind === 'run' && d.reason], ['c', 'preferred']);
    const none = decide(cands, req({ prefer: ['nosuch'] }), opts());
    assert.equal(none.kind, 'run');
  });

  it('routes nothing to a stale host, and waits when nothing is free', () => {
    assert.deepEqual(decide([cand('a', { fresh: false })], req(), opts()), { kind: 'wait' });
    assert.deepEqual(decide([cand('a', { free: 0 })], req(), opts()), { kind: 'wait' });
  });

  it('keeps a session on its rendezvous host from any entry node, moves it when full, brings it back', () => {
    const hosts = ['a', 'b', 'c'];
    const placements = new Map<string, string>();
    for (let k = 0; k < 50; k++) {
      const key = `session-${k}`;
      const chosen = hosts.map((entry) => {
        const cands = hosts.map((h) => cand(h, { local: h === entry }));
        const d = decide(cands, req({ sessionKey: key }), opts());
        return d.kind === 'run' ? d.host : '';
      });
      assert.equal(new Set(chosen).size, 1, `key ${key} landed on ${chosen}`);
      placements.set(key, chosen[0]);
    }
    assert.ok(new Set(placements.values()).size >= 2);
    const [key, home] = [...placements][0];
    const full = hosts.map((h) => cand(h, { free: h === home ? 0 : 1 }));
    const away = decide(full, req({ sessionKey: key }), opts());
    assert.ok(away.kind === 'run' && away.host !== home);
    const back = decide(hosts.map((h) => cand(h)), req({ sessionKey: key }), opts());
    assert.equal(back.kind === 'run' && back.host, home);
  });

  it('keeps a session on its home however the measured scores move within the seed’s 1.25 band (no speed-class line)', () => {
    const hosts = ['a', 'b', 'c'];
    const key = 'k';
    const home = (decide(hosts.map((h) => cand(h, { overheadMs: 100 })), req({ sessionKey: key }), opts()) as { host: string }).host;
    for (const slower of [100, 109.9, 124.9]) {
      const cands = hosts.map((h) => cand(h, { overheadMs: h === home ? slower : 100 }));
      const d = decide(cands, req({ sessionKey: key, promptTokens: 0 }), opts());
      assert.ok(d.kind === 'run' && d.host === home && d.reason === 'session', `home at ${slower} ms`);
    }
    // Beaten by more than the band: it moves.
    const d = decide(hosts.map((h) => cand(h, { overheadMs: h === home ? 126 : 100 })), req({ sessionKey: key, promptTokens: 0 }), opts());
    assert.ok(d.kind === 'run' && d.host !== home, `stayed at ${JSON.stringify(d)}`);
  });

  it('decides a session alike from every entry node however far the home is: the band leaves out the hop (issue 42)', () => {
    // Engines of 30 ms; from each entry its own host costs no hop and the others 12 ms, more than the band's 7.5 ms.
    const hosts = ['a', 'b', 'c'];
    for (let k = 0; k < 12; k++) {
      const key = `fast-${k}`;
      const from = hosts.map((entry) => {
        const cands = hosts.map((h) => cand(h, { local: h === entry, overheadMs: 30, rttMs: h === entry ? 0 : 12 }));
        const d = decide(cands, req({ sessionKey: key, promptTokens: 0 }), opts());
        assert.equal(d.kind === 'run' && d.reason, 'session');
        return d.kind === 'run' ? d.host : '';
      });
      assert.deepEqual(from, [from[0], from[0], from[0]], `${key}: entries a, b, c ran it on ${from.join(', ')}`);
    }
  });

  it('waits for a full warm home alike from every entry node: the wait rule leaves out the hop too (issue 42)', () => {
    // The home holds the whole prompt and frees a slot in about 10 ms; the others are free and cold. Worth the wait by
    // the prices alone (30 + 3 × 10 against 70), but with the hop counted the entry beside the home waited while the
    // others moved the turn.
    const hosts = ['a', 'b', 'c'];
    for (let k = 0; k < 12; k++) {
      const key = `full-${k}`;
      const home = (decide(hosts.map((h) => cand(h, { overheadMs: 30, ratePer1k: 40 })), req({ sessionKey: key, promptTokens: 1000 }), opts()) as { host: string }).host;
      const from = hosts.map((entry) => {
        const cands = hosts.map((h) =>
          cand(h, { local: h === entry, overheadMs: 30, ratePer1k: 40, rttMs: h === entry ? 0 : 12, ...(h === home ? { free: 0, cached: 1000, releaseMs: 10 } : {}) }),
        );
        return decide(cands, req({ sessionKey: key, promptTokens: 1000 }), opts());
      });
      for (const [i, d] of from.entries()) assert.ok(d.kind === 'wait' && d.host === home, `${key} entering ${hosts[i]}: ${JSON.stringify(d)} (home ${home})`);
      const holds = from.map((d) => (d.kind === 'wait' ? d.holdMs : undefined));
      assert.deepEqual(holds, [holds[0], holds[0], holds[0]], `${key}: held ${holds.join(', ')} ms`);
    }
  });

  it('weighted draw covers the whole band', () => {
    const band = [100, 200].map((p) => ({ c: cand(String(p)), prediction: p, service: p, evictMs: 0, wait: 0, score: p, cached: 0 }));
    assert.equal(weightedDraw(band, 0).prediction, 100);
    assert.equal(weightedDraw(band, 0.9999).prediction, 200);
  });
});

function host(name: string, models: Record<string, HostModelView>, over: Partial<HostView> = {}): HostView {
  return { name, local: false, rttMs: 1, fresh: true, polledAt: 1000, models: new Map(Object.entries(models)), ...over };
}

const chatTarget = (slots: number, busy = 0) => ({ descriptor: { workloads: ['chat', 'completion'], audio: false }, slots, busy });

describe('candidates and refusal marks', () => {
  it('a refusal keeps a host full until a report whose poll was sent after it', () => {
    const mark = { host: 'b', model: 'm', workload: 'chat', at: 1500 };
    const before = candidates({ hosts: [host('b', { m: { targets: [chatTarget(4)], slots: 4, busy: 0 } }, { polledAt: 1000 })], forwards: forwardsIn([]), marks: [mark] }, 'm', 'chat');
    assert.equal(before[0].free, 0);
    const stillOld = candidates({ hosts: [host('b', { m: { targets: [chatTarget(4)], slots: 4, busy: 0 } }, { polledAt: 1499 })], forwards: forwardsIn([]), marks: [mark] }, 'm', 'chat');
    assert.equal(stillOld[0].free, 0);
    const after = candidates({ hosts: [host('b', { m: { targets: [chatTarget(4)], slots: 4, busy: 0 } }, { polledAt: 1501 })], forwards: forwardsIn([]), marks: [mark] }, 'm', 'chat');
    assert.equal(after[0].free, 4);
  });

  it('deducts own forwards that started after the report’s poll', () => {
    const h = host('b', { m: { targets: [chatTarget(4, 1)], slots: 4, busy: 1 } }, { polledAt: 1000 });
    const forwards = [
      { host: 'b', model: 'm', workload: 'chat', target: 'chat,completion', startedAt: 900 },
      { host: 'b', model: 'm', workload: 'chat', target: 'chat,completion', startedAt: 1100 },
    ];
    assert.equal(candidates({ hosts: [h], forwards: forwardsIn(forwards), marks: [] }, 'm', 'chat')[0].free, 2);
  });

  it('a forward that the report counted busy and that has ended since frees its slot at once', () => {
    const h = host('b', { m: { targets: [chatTarget(2, 2)], slots: 2, busy: 2 } }, { polledAt: 1000 });
    const ended = (startedAt: number, endedAt: number) => ({ host: 'b', model: 'm', workload: 'chat', target: 'chat,completion', startedAt, endedAt });
    assert.equal(candidates({ hosts: [h], forwards: forwardsIn([]), marks: [] }, 'm', 'chat')[0].free, 0);
    assert.equal(candidates({ hosts: [h], forwards: forwardsIn([ended(900, 1200)]), marks: [] }, 'm', 'chat')[0].free, 1);
    // Ended before the poll: the report already knows. Started after it: the report never counted it.
    assert.equal(candidates({ hosts: [h], forwards: forwardsIn([ended(800, 950)]), marks: [] }, 'm', 'chat')[0].free, 0);
    assert.equal(candidates({ hosts: [h], forwards: forwardsIn([ended(1100, 1200)]), marks: [] }, 'm', 'chat')[0].free, 0);
    // Never beyond what the report showed busy.
    const oneBusy = host('b', { m: { targets: [chatTarget(2, 1)], slots: 2, busy: 1 } }, { polledAt: 1000 });
    assert.equal(candidates({ hosts: [oneBusy], forwards: forwardsIn([ended(900, 1200), ended(901, 1201), ended(902, 1202)]), marks: [] }, 'm', 'chat')[0].free, 2);
  });

  it('an on-demand model being unloaded is still available: a request waits for its load, it is not refused 503', () => {
    // Seen in the suite: a request entering as the only host's idle unload ended was answered no_healthy_backend.
    for (const state of ['unloaded', 'unloading'] as const) {
      const h = host('a', { m: { targets: [{ ...chatTarget(0), onDemand: true, state, memory: 1 << 20 }], slots: 0, busy: 0 } });
      const cands = candidates({ hosts: [h], forwards: forwardsIn([]), marks: [] }, 'm', 'chat');
      assert.equal(cands[0].available, true, state);
      assert.doesNotThrow(() => checkServable({ model: 'm', workload: 'chat', pin: undefined }, [h], cands), state);
    }
    // An always entry with no healthy backend is another matter: that is the engines' failure to report.
    const dead = host('a', { m: { targets: [chatTarget(0)], slots: 0, busy: 0 } });
    assert.throws(() => checkServable({ model: 'm', workload: 'chat', pin: undefined }, [dead], candidates({ hosts: [dead], forwards: forwardsIn([]), marks: [] }, 'm', 'chat')), /no healthy backend/);
  });

  it('an older node without targets does chat and completion only', () => {
    const h = host('old', { m: { targets: undefined, slots: 2, busy: 0 } });
    assert.equal(candidates({ hosts: [h], forwards: forwardsIn([]), marks: [] }, 'm', 'chat')[0].free, 2);
    assert.equal(candidates({ hosts: [h], forwards: forwardsIn([]), marks: [] }, 'm', 'embeddings').length, 0);
  });
});
