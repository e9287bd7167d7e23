import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { RejoinLoop, type LoopTimer } from '../../src/mesh/discovery/rejoin.ts';
import { SeedFeeder, splitHostPort } from '../../src/mesh/discovery/seeds.ts';
import type { Feeder } from '../../src/mesh/discovery/feeder.ts';

/** A timer whose callbacks run only when the test says so. */
class ManualTimer implements LoopTimer {
  pending = new Map<number, { fn: () => void; ms: number }>();
  #next = 1;
  setTimeout(fn: () => void, ms: number): unknown {
    const id = this.#next++;
    this.pending.set(id, { fn, ms });
    return id;
  }
  clearTimeout(handle: unknown): void {
    this.pending.delete(handle as number);
  }
  /** Fire every pending timer of the given delay. */
  fire(ms: number): number {
    let n = 0;
    for (const [id, t] of [...this.pending]) {
      if (t.ms !== ms) continue;
      this.pending.delete(id);
      t.fn();
      n++;
    }
    return n;
  }
}

async function until(cond: () => boolean, what: string, ms = 3000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

const fixed = (name: string, list: string[]): Feeder => ({ name, candidates: async () => list });

describe('rejoin loop', () => {
  test('joins at most 8 at once and every candidate once per round', async () => {
    const addrs = Array.from({ length: 20 }, (_, i) => `10.0.0.${i + 1}:7946`);
    let inflight = 0;
    let peak = 0;
    const joined: string[] = [];
    const gates: (() => void)[] = [];
    const loop = new RejoinLoop({
      feeders: [fixed('a', addrs.slice(0, 12)), fixed('b', addrs.slice(8))],
      isAlive: () => false,
      self: [],
      intervalMs: 60_000,
      timer: new ManualTimer(),
      join: async (list) => {
        assert.equal(list.length, 1);
        inflight++;
        peak = Math.max(peak, inflight);
        await new Promise<void>((r) => gates.push(r));
        joined.push(list[0]);
        inflight--;
      },
    });
    const round = loop.runOnce();
    await until(() => inflight === 8, '8 joins in flight');
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(inflight, 8, 'no ninth join starts while 8 are in flight');
    while (joined.length < 20) {
      await until(() => gates.length > 0, 'a join to release');
      gates.shift()!();
      await new Promise((r) => setImmediate(r));
      assert.ok(inflight <= 8);
    }
    const r = await round;
    assert.equal(peak, 8);
    assert.deepEqual([...joined].sort(), [...addrs].sort());
    assert.equal(r.candidates.length, 20);
    assert.equal(r.attempted.length, 20);
  });

  test('skips alive members and this node', async () => {
    const joined: string[] = [];
    const loop = new RejoinLoop({
      feeders: [fixed('seeds', ['10.0.0.1:7946', '10.0.0.2:7946', '10.0.0.3:7946', '10.0.0.9:7946'])],
      isAlive: (a) => a === '10.0.0.2:7946',
      self: ['10.0.0.9:7946'],
      intervalMs: 1000,
      timer: new ManualTimer(),
      join: async (list) => void joined.push(...list),
    });
    const r = await loop.runOnce();
    assert.deepEqual(joined.sort(), ['10.0.0.1:7946', '10.0.0.3:7946']);
    assert.deepEqual(r.attempted.sort(), ['10.0.0.1:7946', '10.0.0.3:7946']);
  });

  test('runs once at start, then again every interval, until stopped', async () => {
    const timer = new ManualTimer();
    let rounds = 0;
    const loop = new RejoinLoop({
      feeders: [{ name: 'count', candidates: async () => (rounds++, []) }],
      isAlive: () => false,
      self: [],
      intervalMs: 5000,
      timer,
      join: async () => {},
    });
    loop.start();
    await until(() => rounds === 1 && timer.pending.size === 1, 'first round');
    assert.equal([...timer.pending.values()][0].ms, 5000);
    timer.fire(5000);
    await until(() => rounds === 2 && timer.pending.size === 1, 'second round');
    timer.fire(5000);
    await until(() => rounds === 3 && timer.pending.size === 1, 'third round');
    await loop.stop();
    assert.equal(timer.pending.size, 0, 'no round scheduled after stop');
  });

  test('survives a feeder that throws or hangs, and a join that fails, logging once per change', async () => {
    const timer = new ManualTimer();
    const logs: string[] = [];
    const joined: string[] = [];
    const loop = new RejoinLoop({
      feeders: [
        { name: 'broken', candidates: async () => { throw new Error('socket gone'); } },
        { name: 'sync-throw', candidates: () => { throw new Error('not even a promise'); } },
        { name: 'hung', candidates: () => new Promise<string[]>(() => {}) },
        fixed('seeds', ['10.0.0.1:7946', '10.0.0.2:7946']),
      ],
      isAlive: () => false,
      self: [],
      intervalMs: 1000,
      feederTimeoutMs: 50,
      timer,
      log: (m) => logs.push(m),
      join: async ([a]) => {
        if (a === '10.0.0.2:7946') throw new Error('connection refused');
        joined.push(a);
      },
    });
    const round = loop.runOnce();
    await until(() => timer.pending.size === 1, 'the feeder timeout');
    timer.fire(50);
    const r = await round;
    assert.deepEqual(joined, ['10.0.0.1:7946']);
    assert.deepEqual(r.failed, [{ addr: '10.0.0.2:7946', error: 'connection refused' }]);
    const second = loop.runOnce();
    await until(() => timer.pending.size === 1, 'the feeder timeout');
    timer.fire(50);
    await second;
    assert.equal(joined.length, 2);
    assert.equal(logs.filter((l) => /socket gone/.test(l)).length, 1);
    assert.equal(logs.filter((l) => /not even a promise/.test(l)).length, 1);
    assert.equal(logs.filter((l) => /hung took longer/.test(l)).length, 1);
    assert.equal(logs.filter((l) => /join 10.0.0.2:7946 failed/.test(l)).length, 1);
  });

  test('a second runOnce while a round runs shares that round', async () => {
    let calls = 0;
    let release!: () => void;
    const loop = new RejoinLoop({
      feeders: [{ name: 'slow', candidates: () => (calls++, new Promise<string[]>((r) => (release = () => r([])))) }],
      isAlive: () => false,
      self: [],
      intervalMs: 1000,
      timer: new ManualTimer(),
      join: async () => {},
    });
    const a = loop.runOnce();
    const b = loop.runOnce();
    assert.equal(a, b);
    await until(() => release !== undefined, 'feeder called');
    release();
    await a;
    assert.equal(calls, 1);
  });
});

describe('seeds', () => {
  test('seeds are proposed as given, deduplicated, host names resolved', async () => {
    const logs: string[] = [];
    const feeder = new SeedFeeder(['10.1.1.1:7946', ' 10.1.1.1:7946', 'gw.lan:7000', '[fd00::1]:7946', 'nope.lan:7946', 'garbage'], {
      lookup: async (h) => {
        if (h === 'gw.lan') return '10.1.1.2';
        throw new Error(`ENOTFOUND ${h}`);
      },
      log: (m) => logs.push(m),
    });
    assert.deepEqual(await feeder.candidates(), ['10.1.1.1:7946', '10.1.1.2:7000', '[fd00::1]:7946']);
    assert.deepEqual(await feeder.candidates(), ['10.1.1.1:7946', '10.1.1.2:7000', '[fd00::1]:7946']);
    assert.equal(logs.length, 2, logs.join('\n'));
  });

  test('splitHostPort', () => {
    assert.deepEqual(splitHostPort('1.2.3.4:7946'), { host: '1.2.3.4', port: 7946 });
    assert.deepEqual(splitHostPort('[::1]:1'), { host: '::1', port: 1 });
    assert.equal(splitHostPort('1.2.3.4'), undefined);
    assert.equal(splitHostPort('1.2.3.4:0'), undefined);
    assert.equal(splitHostPort('1.2.3.4:70000'), undefined);
  });
});
