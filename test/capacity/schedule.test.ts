/** Which members a node polls when (src/capacity/schedule.ts): pure, with the clock passed in. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { duePolls, Interest, routedMember, unsettled, type MemberPoll, type PollRules } from '../../src/capacity/schedule.ts';
import type { CapacityReport } from '../../src/capacity/report.ts';

const RULES: PollRules = { intervalMs: 1000, backgroundMs: 15_000 };
const m = (name: string, over: Partial<MemberPoll> = {}): MemberPoll => ({ name, routed: false, lastSentAt: 0, inFlight: false, ...over });

/**
 * Drive duePolls the way the poller does: a tick every interval (with some
 * jitter), each named member's poll sent at the tick and answered at once.
 * Returns every member's send times.
 */
function run(names: string[], routed: (name: string, now: number) => boolean, ticks: number, rules = RULES, jitter = (_k: number) => 0): Map<string, number[]> {
  const sent = new Map<string, number[]>(names.map((n) => [n, []]));
  for (let k = 0; k < ticks; k++) {
    const now = k * rules.intervalMs + jitter(k);
    const members = names.map((name) => ({ name, routed: routed(name, now), lastSentAt: sent.get(name)!.at(-1), inFlight: false }));
    for (const name of duePolls(members, now, rules)) sent.get(name)!.push(now);
  }
  return sent;
}

const gaps = (xs: number[]) => xs.slice(1).map((x, i) => x - xs[i]);

describe('duePolls', () => {
  it('polls a member never polled at once, routed or not', () => {
    assert.deepEqual(duePolls([m('a', { lastSentAt: undefined }), m('b', { lastSentAt: undefined, routed: true })], 5, RULES), ['a', 'b']);
  });

  it('polls a routed member every interval, whatever the jitter of the ticks', () => {
    const jitter = (k: number) => [0, 40, -30, 120, -90, 10][k % 6];
    const sent = run(['r'], () => true, 60, RULES, jitter);
    assert.equal(sent.get('r')!.length, 60);
    for (const g of gaps(sent.get('r')!)) assert.ok(g <= 1000 + 2 * 120, `gap ${g}`);
  });

  it('does not poll a routed member twice within half an interval (a tick the node runs early adds no poll)', () => {
    assert.deepEqual(duePolls([m('r', { routed: true, lastSentAt: 1000 })], 1400, RULES), []);
    assert.deepEqual(duePolls([m('r', { routed: true, lastSentAt: 1000 })], 1500, RULES), ['r']);
  });

  it('never sends a second poll to a member whose poll is in flight', () => {
    assert.deepEqual(duePolls([m('r', { routed: true, lastSentAt: 0, inFlight: true }), m('s', { lastSentAt: undefined, inFlight: true })], 60_000, RULES), []);
  });

  it('polls the other members about every background period, spread over the ticks', () => {
    const names = Array.from({ length: 300 }, (_, i) => `m${i}`);
    const routedSet = new Set(names.slice(0, 15));
    const sent = run(names, (n) => routedSet.has(n), 120);
    // Every member is polled at the first tick (never polled before); after that the background ones spread out.
    const perTick = new Map<number, number>();
    for (const [name, times] of sent) {
      if (routedSet.has(name)) {
        assert.equal(times.length, 120, name);
        continue;
      }
      for (const g of gaps(times)) assert.ok(g >= 14_000 && g <= 30_000, `${name}: gap ${g}`);
      assert.ok(times.length >= 5 && times.length <= 9, `${name}: ${times.length} polls in 120 s`);
      for (const t of times.slice(1)) perTick.set(t, (perTick.get(t) ?? 0) + 1);
    }
    // Fair share per tick: 285 background members × 1 s / 15 s = 19.
    assert.ok(Math.max(...perTick.values()) <= 19, `at most 19 background polls per tick, saw ${Math.max(...perTick.values())}`);
    const total = [...sent.values()].reduce((n, xs) => n + xs.length, 0);
    // 300 polls/s before; now 15 + 285/15 ≈ 34/s.
    assert.ok(total / 120 < 40, `${(total / 120).toFixed(1)} polls/s`);
  });

  it('polls a member at the next call once it becomes routed, not at its background turn', () => {
    const sent = run(['a', 'b'], () => false, 5);
    assert.deepEqual(sent.get('b'), [0], 'polled once, at the start');
    // A request for b's model arrives at 4300: the node calls duePolls then and there.
    assert.deepEqual(duePolls([m('a', { lastSentAt: 0 }), m('b', { routed: true, lastSentAt: 0 })], 4300, RULES), ['b']);
    assert.deepEqual(duePolls([m('a', { lastSentAt: 0 }), m('b', { routed: false, lastSentAt: 0 })], 4300, RULES), []);
  });

  it('with the background period no longer than the interval, polls every member every interval (SPEC section 7)', () => {
    const names = Array.from({ length: 50 }, (_, i) => `m${i}`);
    const sent = run(names, () => false, 30, { intervalMs: 1000, backgroundMs: 1000 });
    for (const [name, times] of sent) assert.equal(times.length, 30, name);
    const shorter = run(names, () => false, 30, { intervalMs: 1000, backgroundMs: 200 });
    for (const [name, times] of shorter) assert.equal(times.length, 30, name);
  });

  it('takes the oldest background members first, ties by name, whatever the input order', () => {
    const members = [m('c', { lastSentAt: 100 }), m('b', { lastSentAt: 0 }), m('a', { lastSentAt: 0 }), ...Array.from({ length: 27 }, (_, i) => m(`z${i}`, { lastSentAt: 50_000 }))];
    // 30 background members → 2 per tick.
    assert.deepEqual(duePolls(members, 20_000, RULES), ['a', 'b']);
    assert.deepEqual(duePolls([...members].reverse(), 20_000, RULES), ['a', 'b']);
  });
});

describe('routedMember', () => {
  const wanted = (x: string) => x === 'asked';
  it('routes to a member serving a model this node wants', () => {
    assert.equal(routedMember({ models: ['other', 'asked'], unsettled: false, forwarding: false }, wanted), true);
    assert.equal(routedMember({ models: ['other'], unsettled: false, forwarding: false }, wanted), false);
    assert.equal(routedMember({ models: [], unsettled: false, forwarding: false }, wanted), false);
  });
  it('keeps polling a member with a forward in flight (its watchdog ends the stream on a stale report)', () => {
    assert.equal(routedMember({ models: ['other'], unsettled: false, forwarding: true }, wanted), true);
  });
  it('keeps polling a member whose backends are loading or down (a stale "down" would answer 503)', () => {
    assert.equal(routedMember({ models: ['other'], unsettled: true, forwarding: false }, wanted), true);
  });
  it('a member with no report yet is not routed to by its models (duePolls polls it at once anyway)', () => {
    assert.equal(routedMember({ models: undefined, unsettled: false, forwarding: false }, wanted), false);
  });
});

describe('unsettled', () => {
  const report = (over: Partial<CapacityReport['models'][number]>): CapacityReport => ({ node: 'x', models: [{ name: 'a', slots: 4, busy: 0, backends: 1, healthy_backends: 1, targets: [{ workloads: ['chat'], audio: false, slots: 4, busy: 0, loading: 0 }], ...over }] });
  it('is false for a member whose backends are all healthy, busy or not', () => {
    assert.equal(unsettled(report({})), false);
    assert.equal(unsettled(report({ busy: 4 })), false);
    assert.equal(unsettled({ node: 'x', models: [] }), false);
  });
  it('is true when a backend is down or loading', () => {
    assert.equal(unsettled(report({ healthy_backends: 0 })), true);
    assert.equal(unsettled(report({ targets: [{ workloads: ['chat'], audio: false, slots: 0, busy: 0, loading: 1 }] })), true);
  });
  it('reads missing fields (an older node) as settled', () => {
    assert.equal(unsettled({ node: 'x', models: [{ name: 'a', slots: 4, busy: 1 }] }), false);
  });
});

describe('Interest', () => {
  it('wants a model for the window after its last request, then forgets it', () => {
    let now = 0;
    const i = new Interest(600_000, () => now);
    assert.equal(i.has('a'), false);
    assert.equal(i.note('a'), true, 'newly wanted');
    now = 300_000;
    assert.equal(i.note('a'), false, 'already wanted');
    now = 899_999;
    assert.equal(i.has('a'), true);
    now = 900_001;
    assert.equal(i.has('a'), false);
    assert.equal(i.note('a'), true, 'wanted again');
  });
  it('prunes what it no longer wants', () => {
    let now = 0;
    const i = new Interest(1000, () => now);
    for (let k = 0; k < 100; k++) i.note(`m${k}`);
    now = 500;
    i.note('kept');
    now = 1200;
    i.prune();
    assert.equal(i.has('kept'), true);
    assert.equal(i.has('m1'), false);
  });
});
