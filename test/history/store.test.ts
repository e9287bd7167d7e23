/**
 * History's own rules (SPEC section 10): bounded rings, steps that close into
 * rates and quantiles, the step in progress shown live, and GET
 * /v1/history's query with its 400s.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ApiError } from '../../src/http/errors.ts';
import { parseHistoryQuery } from '../../src/history/query.ts';
import { Ring } from '../../src/history/ring.ts';
import { History, type RequestFacts } from '../../src/history/store.ts';
import { SERIES_NAMES } from '../../src/history/names.ts';

const STEP = 10_000;
const T0 = 1_700_000_000_000 - (1_700_000_000_000 % STEP);

function req(over: Partial<RequestFacts> = {}): RequestFacts {
  return { executor: 'a', outcome: '200', queuedMs: 0, startedAt: 0, ...over };
}

const all = (since: number) => ({ names: new Set(SERIES_NAMES), since });

function pointsOf(h: History, name: string, now: number, node = 'a', model: string | null = 'm') {
  return h.query(all(now - 3_600_000), now).series.find((s) => s.name === name && s.node === node && s.model === model)?.points;
}

describe('history', () => {
  it('a ring holds the last `size` steps and forgets older ones', () => {
    const r = new Ring(STEP, 4);
    for (let s = 0; s < 10; s++) r.set(s, s * 2);
    assert.deepEqual(r.points(0, 9), [[6 * STEP, 12], [7 * STEP, 14], [8 * STEP, 16], [9 * STEP, 18]]);
    assert.equal(r.get(5), undefined, 'a cell from an older lap reads as no value');
  });

  it('a closed step reads as rates, quantiles and shares of the requests in it', () => {
    const h = new History('a');
    for (let i = 0; i < 20; i++) h.request('m', req({ firstContentAt: i < 19 ? 100 : 2000, promptTokens: 100, cachedTokens: 25, completionTokens: 10, queuedMs: 4 }), T0 + 100 * i);
    h.request('m', req({ outcome: '429', executor: null }), T0 + 5000);
    h.advance(T0 + STEP + 1);
    assert.deepEqual(pointsOf(h, 'requests', T0 + STEP + 1)?.[0], [T0, 2.1]);
    assert.deepEqual(pointsOf(h, 'rejected', T0 + STEP + 1)?.[0], [T0, 0.1]);
    const p50 = pointsOf(h, 'ttft_p50', T0 + STEP + 1)![0][1];
    assert.ok(p50 > 88 && p50 < 112, `p50 ${p50} is about 100 ms`);
    const p95 = pointsOf(h, 'ttft_p95', T0 + STEP + 1)![0][1];
    assert.ok(p95 > 88 && p95 < 112, `p95 ${p95}: one slow request of twenty is past the 95th percentile`);
    assert.deepEqual(pointsOf(h, 'tokens_in', T0 + STEP + 1)?.[0], [T0, 200]);
    assert.deepEqual(pointsOf(h, 'tokens_out', T0 + STEP + 1)?.[0], [T0, 20]);
    assert.deepEqual(pointsOf(h, 'cached_share', T0 + STEP + 1)?.[0], [T0, 0.25]);
    assert.deepEqual(pointsOf(h, 'queue_wait', T0 + STEP + 1)?.[0], [T0, 4]);
  });

  it('the step in progress is shown as far as it has come, and quiet steps read 0 req/s', () => {
    const h = new History('a');
    h.request('m', req(), T0 + 1000);
    h.request('m', req(), T0 + 1500);
    assert.deepEqual(pointsOf(h, 'requests', T0 + 2000), [[T0, 1]], 'two requests in the first two seconds: 1 req/s so far');
    assert.deepEqual(pointsOf(h, 'requests', T0 + 3 * STEP + 10), [[T0, 0.2], [T0 + STEP, 0], [T0 + 2 * STEP, 0], [T0 + 3 * STEP, 0]]);
  });

  it('requests are kept per host that ran them and per model', () => {
    const h = new History('a');
    h.request('m', req({ executor: 'b' }), T0);
    h.request('n', req({ executor: 'a' }), T0);
    const doc = h.query({ names: new Set(['requests'] as const), since: T0, node: 'b' }, T0 + 1000);
    assert.deepEqual(doc.series.map((s) => [s.node, s.model]), [['b', 'm']]);
    assert.equal(h.query({ names: new Set(['requests'] as const), since: T0, model: 'n' }, T0 + 1000).series[0].node, 'a');
  });

  it('memory is bounded: series past the fuse are dropped and said once', () => {
    const said: string[] = [];
    const h = new History('a', { maxSeries: 3, onFull: (m) => said.push(m) });
    for (let i = 0; i < 10; i++) h.gauge('slots', `host${i}`, 'm', 1, T0);
    assert.equal(h.seriesCount, 3);
    assert.equal(said.length, 1);
    assert.match(said[0], /at most 3 series/);
  });
});

describe('GET /v1/history query', () => {
  const KEEP = 6 * 3_600_000;
  const now = T0;
  const parse = (q: string) => parseHistoryQuery(new URLSearchParams(q), now, KEEP);
  const rejects = (q: string, pattern: RegExp) =>
    assert.throws(
      () => parse(q),
      (e: unknown) => e instanceof ApiError && e.status === 400 && pattern.test(e.message),
    );

  it('reads series, since back from now and the filters', () => {
    const q = parse('series=requests,ttft_p95&since=-1h&node=b&model=m');
    assert.deepEqual([...q.names], ['requests', 'ttft_p95']);
    assert.equal(q.since, now - 3_600_000);
    assert.equal(q.node, 'b');
    assert.equal(q.model, 'm');
    assert.equal(parse('').since, now - 15 * 60_000, 'the last 15 minutes by default');
    assert.equal(parse('').names.size, SERIES_NAMES.length, 'every series by default');
    assert.equal(parse(`since=${now - 5000}`).since, now - 5000);
    // One meaning for `since` on every endpoint (issue 44): a span with or without its minus, an ISO date.
    assert.equal(parse('since=15m').since, now - 15 * 60_000);
    assert.equal(parse('since=-1h').since, now - 3_600_000);
    assert.equal(parse(`since=${new Date(now - 60_000).toISOString()}`).since, now - 60_000);
  });

  it('bad input is a 400 that says what is right', () => {
    rejects('series=requests,bogus', /unknown series "bogus"; the series are requests, /);
    rejects('since=-7h', /further back than the 6 h this node keeps/);
    rejects('since=-99999999h', /further back than the 6 h/);
    rejects(`since=${now + 60_000}`, /in the future/);
    rejects('since=0', /further back than the 6 h/);
    rejects('since=yesterday', /is not a span back from now \(15m, -1h, 7d\), ms since the epoch, or an ISO date/);
    rejects('since=-abc', /is not a span back from now/);
    rejects(`since=${'9'.repeat(400)}`, /past any date/);
    rejects(`model=${'x'.repeat(300)}`, /longer than 256/);
  });
});
