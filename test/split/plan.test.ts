/**
 * Issue 45: the placement of a model bigger than one host, as a table. The
 * runner is the member with the entry and the most free memory; the lenders
 * the fewest lending members (in the entry's list, when it names some)
 * whose free memory with the runner's holds the model; parts in proportion
 * to free memory, never more than a member has free.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { lendersOf, rankLoadHosts, type Lender, type LoadHost } from '../../src/route/placement.ts';
import { planSplit, proportionalParts, tensorSplit, type SplitMember } from '../../src/route/split-plan.ts';
import type { HostView } from '../../src/route/types.ts';

const G = 1024 ** 3;
const m = (name: string, freeG: number, o: Partial<SplitMember> = {}): SplitMember => ({ name, free: freeG * G, runs: false, lends: true, ...o });

describe('split placement (pure)', () => {
  const table: { name: string; need: number; members: SplitMember[]; split?: 'auto' | string[]; runner?: string; want: string }[] = [
    { name: 'fits the runner whole: no split', need: 10, members: [m('a', 24, { runs: true }), m('b', 24)], want: 'whole a' },
    { name: 'three 24 GiB machines, a 40 GiB model: the runner and one lender', need: 40, members: [m('a', 20, { runs: true }), m('b', 22), m('c', 21)], want: 'split a:20+b:22' },
    { name: 'the runner is the one with the entry and the most free', need: 40, members: [m('a', 10, { runs: true }), m('b', 18, { runs: true }), m('c', 23)], want: 'split b:18+c:23' },
    { name: 'fewest lenders: the largest first', need: 50, members: [m('a', 10, { runs: true }), m('b', 5), m('c', 40), m('d', 8)], want: 'split a:10+c:40' },
    { name: 'three parts when two do not hold it', need: 60, members: [m('a', 24, { runs: true }), m('b', 20), m('c', 20), m('d', 2)], want: 'split a:24+b:20+c:20' },
    { name: 'a member without lend_memory never lends', need: 40, members: [m('a', 20, { runs: true }), m('b', 40, { lends: false }), m('c', 22)], want: 'split a:20+c:22' },
    { name: 'only the members the entry names', need: 40, split: ['c'], members: [m('a', 20, { runs: true }), m('b', 40), m('c', 22)], want: 'split a:20+c:22' },
    { name: 'nothing holds it: none, saying why', need: 100, members: [m('a', 20, { runs: true }), m('b', 30)], want: 'none' },
    { name: 'no lender at all', need: 40, members: [m('a', 20, { runs: true }), m('b', 40, { lends: false })], want: 'none' },
    { name: 'no member has the entry', need: 40, members: [m('a', 20), m('b', 40)], want: 'none' },
    { name: 'a runner named plans with itself, even with less free than another', need: 40, runner: 'a', members: [m('a', 10, { runs: true }), m('b', 30, { runs: true }), m('c', 35)], want: 'split a:10+c:35' },
    { name: 'ties go to the lower name', need: 30, members: [m('b', 20, { runs: true, lends: false }), m('a', 20, { runs: true }), m('d', 15), m('c', 15)], want: 'split a:20+c:15' },
  ];
  for (const t of table) {
    it(t.name, () => {
      const p = planSplit({ need: t.need * G, members: t.members, split: t.split ?? 'auto', runner: t.runner });
      if (p.kind === 'whole') return assert.equal(`whole ${p.runner}`, t.want);
      if (p.kind === 'none') {
        assert.equal('none', t.want);
        return assert.ok(p.why.length > 10, p.why);
      }
      assert.equal(`split ${p.parts.map((x) => `${x.member}:${Math.round((t.members.find((y) => y.name === x.member)!.free) / G)}`).join('+')}`, t.want);
      assert.equal(p.runner, p.parts[0].member, 'the runner holds the first part');
      assert.equal(p.parts.reduce((n, x) => n + x.bytes, 0), t.need * G, 'the parts add up to the model');
      for (const x of p.parts) assert.ok(x.bytes <= t.members.find((y) => y.name === x.member)!.free, `${x.member} holds no more than it has free`);
    });
  }

  it('the refusal names the figures', () => {
    const p = planSplit({ need: 100 * G, members: [m('a', 20, { runs: true }), m('b', 30)], split: 'auto' });
    assert.equal(p.kind, 'none');
    if (p.kind === 'none') assert.match(p.why, /needs 100\.0 GiB; a has 20\.0 GiB free and the lenders b 30\.0 GiB: 50\.0 GiB together/);
  });

  it('parts are in proportion to free memory, and --tensor-split says the same in MiB', () => {
    const parts = proportionalParts(30 * G, [{ name: 'a', free: 20 * G }, { name: 'b', free: 10 * G }]);
    assert.deepEqual(parts, [{ member: 'a', bytes: 20 * G }, { member: 'b', bytes: 10 * G }]);
    assert.equal(tensorSplit(parts), '20480,10240');
    const odd = proportionalParts(1001, [{ name: 'a', free: 1000 }, { name: 'b', free: 1000 }, { name: 'c', free: 1000 }]);
    assert.equal(odd.reduce((n, p) => n + p.bytes, 0), 1001);
    assert.equal(tensorSplit(odd), '1,1,1', 'at least 1 each');
  });
});

describe('entry placement of a split model (route/placement.ts, pure)', () => {
  const host = (name: string, freeG: number, o: Partial<LoadHost> = {}): LoadHost => ({ host: name, need: 40 * G, free: freeG * G, idle: 0, split: 'auto', ...o });
  const lend = (name: string, freeG: number): Lender => ({ name, free: freeG * G });
  const table: { name: string; hosts: LoadHost[]; lenders: Lender[]; want: string[] }[] = [
    { name: 'fits a host whole: that host, no split', hosts: [host('a', 50), host('b', 20)], lenders: [lend('c', 30)], want: ['a:free', 'b:split'] },
    { name: 'fits none: the host with the most free memory runs it split', hosts: [host('a', 10), host('b', 20)], lenders: [lend('c', 30)], want: ['b:split', 'a:split'] },
    { name: 'a host whose lenders cannot hold the rest is not asked', hosts: [host('a', 5), host('b', 15)], lenders: [lend('c', 30)], want: ['b:split'] },
    { name: 'no lender: nothing', hosts: [host('a', 10), host('b', 20)], lenders: [], want: [] },
    { name: 'an entry without split never runs split', hosts: [host('a', 10, { split: undefined }), host('b', 20)], lenders: [lend('c', 30)], want: ['b:split'] },
    { name: 'a host lends to another but not to itself', hosts: [host('a', 20), host('c', 25)], lenders: [lend('c', 25)], want: ['a:split'] },
    { name: 'only the members its split list names lend', hosts: [host('a', 20, { split: ['d'] })], lenders: [lend('c', 30), lend('d', 10)], want: [] },
  ];
  for (const t of table)
    it(t.name, () => {
      assert.deepEqual(rankLoadHosts('m', t.hosts, [], t.lenders).map((c) => `${c.host}:${c.fits}`), t.want);
    });

  it('the members that lend, from the snapshot: fresh, not draining, lending', () => {
    const view = (name: string, o: Partial<HostView>): HostView => ({ name, local: false, rttMs: 0, fresh: true, polledAt: 0, models: new Map(), memory: { budget: 10 * G, used: 0, free: 10 * G }, ...o });
    const got = lendersOf([view('a', { lends: true }), view('b', {}), view('c', { lends: true, fresh: false }), view('d', { lends: true, draining: true }), view('e', { lends: true, local: true, fresh: true })]);
    assert.deepEqual(got.map((l) => l.name), ['a', 'e']);
  });
});
