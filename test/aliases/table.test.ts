/** The alias table: Lamport ordering, tombstones, revert, order-independent merging, persistence, config seeds. */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { AliasTable } from '../../src/aliases/table.ts';
import { AliasError, compareEntries, type AliasEntry } from '../../src/aliases/types.ts';
import { seeded, shuffle } from '../helpers/random.ts';

const tempDir = () => fs.mkdtempSync(path.join(os.tmpdir(), 'viiwork-alias-'));
const clock = (start = 1_700_000_000_000) => {
  let t = start;
  return () => (t += 1000);
};
const entry = (name: string, version: number, writer: string, target: string | null, fallbacks: string[] = []): AliasEntry => ({
  name,
  version,
  writer,
  at: 1_700_000_000_000 + version,
  value: target === null ? null : { target, fallbacks },
});

function permutations<T>(list: T[]): T[][] {
  if (list.length <= 1) return [list];
  return list.flatMap((x, i) => permutations([...list.slice(0, i), ...list.slice(i + 1)]).map((p) => [x, ...p]));
}

describe('alias table: ordering', () => {
  it('a local change takes the highest version in the table + 1', () => {
    const t = new AliasTable({ now: clock() });
    assert.equal(t.version, 0);
    assert.equal(t.set('chat', 'qwen', [], 'a').version, 1);
    t.merge([entry('code', 7, 'b', 'coder')]);
    assert.equal(t.version, 7);
    const e = t.set('chat', 'llama', ['qwen'], 'a');
    assert.equal(e.version, 8);
    assert.deepEqual(t.get('chat'), { name: 'chat', target: 'llama', fallbacks: ['qwen'], version: 8, writer: 'a', at: e.at });
  });

  it('the higher version wins whatever the arrival order', () => {
    for (const order of permutations([entry('x', 3, 'a', 'm3'), entry('x', 5, 'a', 'm5'), entry('x', 4, 'z', 'm4')])) {
      const t = new AliasTable();
      t.merge(order);
      assert.equal(t.get('x')?.target, 'm5');
      assert.equal(t.version, 5);
    }
  });

  it('on equal versions the higher writer name wins (plain string comparison)', () => {
    for (const order of permutations([entry('x', 4, 'gpu1', 'one'), entry('x', 4, 'gpu2', 'two'), entry('x', 4, 'GPU9', 'upper')])) {
      const t = new AliasTable();
      t.merge(order);
      assert.equal(t.get('x')?.target, 'two');
    }
  });

  it('a tombstone beats an older set, and a late older set does not resurrect the alias', () => {
    const t = new AliasTable();
    t.merge([entry('x', 2, 'a', 'm')]);
    assert.equal(t.merge([entry('x', 3, 'b', null)]).length, 1);
    assert.equal(t.get('x'), undefined);
    assert.equal(t.merge([entry('x', 2, 'z', 'late')]).length, 0);
    assert.equal(t.get('x'), undefined);
    assert.equal(t.entry('x')?.value, null);
    assert.deepEqual(t.list(), []);
    assert.equal(t.snapshot().length, 1, 'the tombstone is kept');
  });

  it('a newer set beats a tombstone', () => {
    const t = new AliasTable();
    t.merge([entry('x', 3, 'b', null), entry('x', 4, 'a', 'back')]);
    assert.equal(t.get('x')?.target, 'back');
  });

  it('merge is idempotent and returns only the entries that changed the table', () => {
    const t = new AliasTable();
    const batch = [entry('x', 1, 'a', 'm'), entry('y', 2, 'a', 'n')];
    assert.equal(t.merge(batch).length, 2);
    assert.deepEqual(t.merge(batch), []);
    assert.deepEqual(t.merge([entry('x', 1, 'a', 'm'), entry('x', 9, 'a', 'o')]).map((e) => e.version), [9]);
  });

  it('malformed entries from gossip are ignored', () => {
    const t = new AliasTable();
    const changed = t.merge([
      null,
      { name: 'has space', version: 1, writer: 'a', at: 0, value: { target: 'm', fallbacks: [] } },
      { name: 'x', version: -1, writer: 'a', at: 0, value: null },
      { name: 'x', version: 1.5, writer: 'a', at: 0, value: null },
      { name: 'x', version: 1, writer: '', at: 0, value: null },
      { name: 'x', version: 1, writer: 'a', at: 0, value: { target: 5 } },
      entry('ok', 1, 'a', 'm'),
    ]);
    assert.deepEqual(changed.map((e) => e.name), ['ok']);
  });

  it('rm leaves a tombstone and refuses a name that is not a live alias', () => {
    const t = new AliasTable();
    t.set('x', 'm', [], 'a');
    const rm = t.remove('x', 'a');
    assert.equal(rm.value, null);
    assert.equal(rm.version, 2);
    assert.throws(() => t.remove('x', 'a'), (e: unknown) => e instanceof AliasError && e.code === 'not_found');
    assert.throws(() => t.remove('never', 'a'), (e: unknown) => e instanceof AliasError && e.code === 'not_found');
  });

  it('rejects bad names with a typed error', () => {
    const t = new AliasTable();
    for (const bad of ['', 'has space', 'tab\there', 'x'.repeat(129), 'nl\n']) {
      assert.throws(() => t.set(bad, 'm', [], 'a'), (e: unknown) => e instanceof AliasError && e.code === 'invalid_name', JSON.stringify(bad));
      assert.throws(() => t.set('ok', bad, [], 'a'), (e: unknown) => e instanceof AliasError && e.code === 'invalid_target', JSON.stringify(bad));
    }
    assert.throws(() => t.set('ok', 'm', ['fine', 'bad one'], 'a'), (e: unknown) => e instanceof AliasError && e.code === 'invalid_target');
    assert.throws(() => t.set('ok', 'm', Array.from({ length: 9 }, (_, i) => `f${i}`), 'a'), (e: unknown) => e instanceof AliasError && e.code === 'too_large');
    assert.equal(t.set('org/model:q4', 'Qwen/Qwen2.5-7B', [], 'a').name, 'org/model:q4');
    assert.equal(t.version, 1, 'refused changes take no version');
  });

  it('refuses a change too large for one gossip packet', () => {
    const t = new AliasTable();
    const long = (c: string) => c.repeat(128);
    // 128 characters of 3 UTF-8 bytes each, eight times over, is far more than 1,200 bytes.
    assert.throws(
      () => t.set('x', long('é'), ['ü', 'ö', 'ä', 'ß', 'ç', 'ñ'].map(long), 'a'),
      (e: unknown) => e instanceof AliasError && e.code === 'too_large',
    );
    assert.equal(t.get('x'), undefined);
  });

  it('drops fallbacks that repeat the target or each other', () => {
    const t = new AliasTable();
    assert.deepEqual(t.set('x', 'm', ['m', 'n', 'n', 'o'], 'a').value, { target: 'm', fallbacks: ['n', 'o'] });
  });
});

describe('alias table: history and revert', () => {
  it('history lists applied changes, most recent last, for one alias or all', () => {
    const t = new AliasTable({ now: clock() });
    t.set('x', 'm1', [], 'a');
    t.set('y', 'n1', [], 'a');
    t.set('x', 'm2', [], 'a');
    t.remove('y', 'a');
    assert.deepEqual(t.history().map((e) => [e.name, e.version, e.value?.target ?? null]), [
      ['x', 1, 'm1'],
      ['y', 2, 'n1'],
      ['x', 3, 'm2'],
      ['y', 4, null],
    ]);
    assert.deepEqual(t.history('x').map((e) => e.version), [1, 3]);
  });

  it('history is bounded and keeps the most recent changes', () => {
    const t = new AliasTable({ historyLimit: 5 });
    for (let i = 0; i < 12; i++) t.set('x', `m${i}`, [], 'a');
    assert.deepEqual(t.history().map((e) => e.version), [8, 9, 10, 11, 12]);
  });

  it('a late older change slots into history by its order', () => {
    const t = new AliasTable();
    t.merge([entry('x', 1, 'a', 'm1'), entry('y', 3, 'a', 'n')]);
    t.merge([entry('x', 2, 'b', 'm2')]);
    assert.deepEqual(t.history().map((e) => e.version), [1, 2, 3]);
  });

  it('revert restores the previous live value as a new change', () => {
    const t = new AliasTable({ now: clock() });
    t.set('x', 'm1', ['f1'], 'a');
    t.set('x', 'm2', [], 'a');
    const r = t.revert('x', 'b');
    assert.deepEqual([r.version, r.writer, r.value], [3, 'b', { target: 'm1', fallbacks: ['f1'] }]);
    assert.equal(t.get('x')?.target, 'm1');
    // Reverting again goes back to the value before m1's restoration: m2.
    assert.equal(t.revert('x', 'a').value?.target, 'm2');
  });

  it('revert after rm brings the removed value back', () => {
    const t = new AliasTable();
    t.set('x', 'm1', [], 'a');
    t.remove('x', 'a');
    assert.equal(t.revert('x', 'a').value?.target, 'm1');
    assert.equal(t.get('x')?.target, 'm1');
  });

  it('revert with nothing earlier, or of an unknown alias, is refused', () => {
    const t = new AliasTable();
    t.set('x', 'm1', [], 'a');
    assert.throws(() => t.revert('x', 'a'), (e: unknown) => e instanceof AliasError && e.code === 'nothing_to_revert');
    assert.throws(() => t.revert('nope', 'a'), (e: unknown) => e instanceof AliasError && e.code === 'not_found');
  });

  it('onChange reports local changes and merges, and can be unsubscribed', () => {
    const t = new AliasTable();
    const seen: string[] = [];
    const off = t.onChange((changed, origin) => seen.push(`${origin}:${changed.map((e) => e.version).join(',')}`));
    t.set('x', 'm', [], 'a');
    t.merge([entry('y', 5, 'b', 'n'), entry('x', 1, 'a', 'm')]);
    t.merge([entry('y', 5, 'b', 'n')]);
    off();
    t.set('x', 'o', [], 'a');
    assert.deepEqual(seen, ['local:1', 'merge:5']);
  });
});

describe('alias table: convergence', () => {
  /** Three writers making changes against their own tables, syncing now and then, so versions interleave and tie. */
  function randomChanges(rand: () => number, count: number): AliasEntry[] {
    const writers = ['n1', 'n2', 'n3'];
    const tables = writers.map(() => new AliasTable({ now: () => Math.floor(rand() * 1e6) }));
    const names = ['a', 'b', 'c', 'd'];
    const all: AliasEntry[] = [];
    for (let i = 0; i < count; i++) {
      const w = Math.floor(rand() * 3);
      const t = tables[w];
      const name = names[Math.floor(rand() * names.length)];
      const r = rand();
      try {
        if (r < 0.55) all.push(t.set(name, `m${Math.floor(rand() * 5)}`, rand() < 0.3 ? [`f${Math.floor(rand() * 3)}`] : [], writers[w]));
        else if (r < 0.75) all.push(t.remove(name, writers[w]));
        else if (r < 0.85) all.push(t.revert(name, writers[w]));
        else {
          const other = tables[Math.floor(rand() * 3)];
          other.merge(t.snapshot());
        }
      } catch (err) {
        if (!(err instanceof AliasError)) throw err;
      }
    }
    // A node that lost its state and reused a (version, writer) with other content.
    if (all.length) {
      const e = all[Math.floor(rand() * all.length)];
      all.push({ ...e, at: e.at + 1, value: { target: 'lost-state', fallbacks: [] } });
    }
    return all;
  }

  /** The expected table: per name, the greatest change. */
  function oracle(changes: AliasEntry[]): AliasEntry[] {
    const best = new Map<string, AliasEntry>();
    for (const c of changes) {
      const cur = best.get(c.name);
      if (!cur || compareEntries(c, cur) > 0) best.set(c.name, c);
    }
    return [...best.keys()].sort().map((k) => best.get(k)!);
  }

  it('200 random histories from 3 writers merge to one snapshot in any order, in any grouping', () => {
    for (let seed = 1; seed <= 200; seed++) {
      const rand = seeded(seed);
      const changes = randomChanges(rand, 5 + Math.floor(rand() * 40));
      const expected = oracle(changes);
      for (let round = 0; round < 4; round++) {
        const one = new AliasTable();
        for (const c of shuffle(changes, rand)) one.merge([c]);
        assert.deepEqual(one.snapshot(), expected, `seed ${seed}, one at a time, round ${round}`);
        // Grouping: two tables merge disjoint halves, then one merges the other's snapshot.
        const mixed = shuffle(changes, rand);
        const cut = Math.floor(rand() * (mixed.length + 1));
        const left = new AliasTable();
        const right = new AliasTable();
        left.merge(mixed.slice(0, cut));
        right.merge(mixed.slice(cut));
        left.merge(right.snapshot());
        right.merge(shuffle(mixed, rand)); // and again: idempotent
        assert.deepEqual(left.snapshot(), expected, `seed ${seed}, grouped, round ${round}`);
        assert.deepEqual(right.snapshot(), expected, `seed ${seed}, re-merged, round ${round}`);
        assert.equal(left.version, Math.max(0, ...changes.map((c) => c.version)));
      }
    }
  });

  it('every permutation of a small set of conflicting changes gives the same snapshot', () => {
    const changes = [
      entry('x', 1, 'n1', 'a'),
      entry('x', 2, 'n2', null),
      entry('x', 2, 'n1', 'b'),
      entry('y', 2, 'n3', 'c'),
      { ...entry('x', 2, 'n2', 'lost'), at: 5 },
      entry('y', 1, 'n3', null),
    ];
    const snapshots = new Set(
      permutations(changes).map((order) => {
        const t = new AliasTable();
        for (const c of order) t.merge([c]);
        return JSON.stringify(t.snapshot());
      }),
    );
    assert.equal(snapshots.size, 1);
  });
});

describe('alias table: persistence and config seeds', () => {
  it('saves every change atomically and loads it back, tombstones and history included', () => {
    const dir = tempDir();
    const t = AliasTable.load(dir, { now: clock() });
    t.set('x', 'm1', ['f'], 'a');
    t.set('x', 'm2', [], 'a');
    t.set('y', 'n', [], 'a');
    t.remove('y', 'a');
    assert.deepEqual(fs.readdirSync(dir), ['aliases.json'], 'no temporary file is left behind');
    const again = AliasTable.load(dir);
    assert.deepEqual(again.snapshot(), t.snapshot());
    assert.deepEqual(again.history(), t.history());
    assert.equal(again.version, 4);
    assert.equal(again.revert('x', 'b').value?.target, 'm1', 'revert works from the saved history');
  });

  it('a missing state directory is created on the first change', () => {
    const dir = path.join(tempDir(), 'deeper', 'state');
    const t = AliasTable.load(dir);
    t.set('x', 'm', [], 'a');
    assert.equal(AliasTable.load(dir).get('x')?.target, 'm');
  });

  it('an unreadable file starts an empty table and is reported', () => {
    const dir = tempDir();
    fs.writeFileSync(path.join(dir, 'aliases.json'), '{not json');
    const logs: string[] = [];
    const t = AliasTable.load(dir, { log: (m) => logs.push(m) });
    assert.deepEqual(t.snapshot(), []);
    assert.equal(logs.length, 1);
    assert.match(logs[0], /aliases\.json is unreadable/);
    t.set('x', 'm', [], 'a');
    assert.equal(AliasTable.load(dir).get('x')?.target, 'm', 'the next change replaces the bad file');
  });

  it('a missing file is an empty table, silently', () => {
    const logs: string[] = [];
    assert.deepEqual(AliasTable.load(tempDir(), { log: (m) => logs.push(m) }).snapshot(), []);
    assert.deepEqual(logs, []);
  });

  it('config aliases are seeded at version 0 by writer "config", in both forms', () => {
    const t = new AliasTable();
    const seeded = t.seed({ fast: 'tiny', smart: { target: 'qwen', fallbacks: ['tiny'] } });
    assert.equal(seeded.length, 2);
    assert.deepEqual(t.entry('smart'), { name: 'smart', version: 0, writer: 'config', at: 0, value: { target: 'qwen', fallbacks: ['tiny'] } });
    assert.equal(t.get('fast')?.target, 'tiny');
    assert.equal(t.version, 0);
    assert.equal(t.set('other', 'm', [], 'a').version, 1);
  });

  it('a config seed never overrides a mesh change, not even a removal, and any mesh change beats it', () => {
    const dir = tempDir();
    const t = AliasTable.load(dir);
    t.set('fast', 'mesh-choice', [], 'a');
    t.set('gone', 'x', [], 'a');
    t.remove('gone', 'a');
    const restarted = AliasTable.load(dir);
    assert.deepEqual(restarted.seed({ fast: 'config-choice', gone: 'config-choice', fresh: 'tiny' }).map((e) => e.name), ['fresh']);
    assert.equal(restarted.get('fast')?.target, 'mesh-choice');
    assert.equal(restarted.get('gone'), undefined);
    // A mesh change that arrives after the seed wins over it.
    restarted.merge([entry('fresh', 1, 'b', 'from-mesh')]);
    assert.equal(restarted.get('fresh')?.target, 'from-mesh');
  });

  it('an invalid config alias is refused before anything is seeded', () => {
    const t = new AliasTable();
    assert.throws(() => t.seed({ ok: 'm', 'bad name': 'm' }), AliasError);
    assert.deepEqual(t.snapshot(), []);
  });
});
