/**
 * A request's timeline (SPEC section 10) from the marks its trace collected:
 * a stream's prefill ends at its first content chunk; a whole answer has no
 * chunk, so its prefill ends where the engine's own prompt time says, and
 * decode runs from there to the end. Without either, prefill runs to the end.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { DecisionRecord } from '../../src/dispatch/decisions.ts';
import { timelineDoc } from '../../src/dispatch/timeline.ts';
import { newTrace, type Trace } from '../../src/dispatch/trace.ts';

const record: DecisionRecord = { seq: 1, at: 1_000_000, entry: 'a', executor: 'a', model: 'm', workload: 'chat', route: 'local', queued_ms: 0, ttft_ms: null, outcome: '200', timeline: 'a:1' };

function ran(marks: Partial<Trace>): Trace {
  const t = newTrace('a', 'local');
  t.startedAt = 100;
  Object.assign(t, { placedAt: 100, grantedAt: 110, engineAt: 112, endedAt: 300, ...marks });
  return t;
}

const phases = (t: Trace) => timelineDoc('a', record, t).phases.map((p) => `${p.name} ${p.from_ms}-${p.to_ms}`);

describe('timeline phases of a request run here', () => {
  it('a stream: prefill to its first content chunk, then decode', () => {
    assert.deepEqual(phases(ran({ firstContentAt: 150 })), ['slot 0-10', 'prefill 12-50', 'decode 50-200']);
  });

  it('a whole answer: prefill for the engine’s own prompt time, then decode (the dashboard shows both)', () => {
    assert.deepEqual(phases(ran({ prefilledAt: 132 })), ['slot 0-10', 'prefill 12-32', 'decode 32-200']);
    assert.equal(timelineDoc('a', record, ran({ prefilledAt: 132 })).first_token_ms, null, 'no first token was sent to the client');
  });

  it('an engine that says nothing of its prompt time: one prefill bar to the end', () => {
    assert.deepEqual(phases(ran({})), ['slot 0-10', 'prefill 12-200']);
  });
});

describe('the decision in a timeline', () => {
  it('shows what each candidate would evict, so a home passed over with a free slot says why', () => {
    const t = ran({ firstContentAt: 150 });
    const base = { local: false, fresh: true, healthy: true, loading: false, free: 1, rttMs: 0, bestTarget: 'chat', overheadMs: 30, ratePer1k: 40 };
    // The home's only free slot holds a live conversation of 2,000 tokens: taking it costs their re-prefill.
    t.cands = [
      { ...base, host: 'home', evicted: { tokens: 2000, idleMs: 100, chance: 1, cascade: 1 } },
      { ...base, host: 'other' },
    ];
    const lines = timelineDoc('a', { ...record, executor: 'other' }, t, 100).decision!.candidates;
    assert.deepEqual(
      lines.map((l) => [l.host, l.evict_ms, l.service_ms, l.chosen]),
      [
        ['home', 80, 114, false],
        ['other', 0, 34, true],
      ],
    );
  });
});
