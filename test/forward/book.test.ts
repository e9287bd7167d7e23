/**
 * The forward book (SPEC section 9, steps 4 and 9) keeps, per member and
 * model, a running count of the forwards that free a slot a report shows
 * busy, so routing does not walk every forward of the last second. Whatever
 * the order of starts, ends, reports and prunes, what it tells routing must
 * equal counting the forwards one by one.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ForwardBook, type ForwardEnd } from '../../src/forward/book.ts';
import { candidates, tallyOf } from '../../src/route/eligibility.ts';
import { descriptorKey } from '../../src/workloads/workloads.ts';
import type { ForwardRecord, HostView, TargetView } from '../../src/route/types.ts';
import { seeded } from '../helpers/random.ts';

const HOSTS = ['b', 'c'];
const MODELS = ['m1', 'm2'];
const TARGETS = ['chat', 'chat+embeddings'];

describe('the forward book', () => {
  it('tells routing what counting every forward one by one tells, through 40 random runs of starts, ends, reports and prunes', () => {
    for (let seed = 1; seed <= 40; seed++) {
      const rnd = seeded(seed);
      const pick = <T>(xs: readonly T[]) => xs[Math.floor(rnd() * xs.length)];
      let now = 1_000;
      const book = new ForwardBook(() => now);
      // The reference: every forward the book should still know, with its end time.
      const known: { f: ForwardRecord; end?: (e: ForwardEnd) => void }[] = [];
      // Each member's latest report was polled at this time.
      const polled = new Map<string, number>(HOSTS.map((h) => [h, now]));
      for (let step = 0; step < 600; step++) {
        // Now and then a long quiet spell: forwards ended over a minute ago are forgotten even without a newer report.
        now += rnd() < 0.01 ? 61_000 : Math.floor(rnd() * 30);
        const r = rnd();
        if (r < 0.4) {
          const f: ForwardRecord = { host: pick(HOSTS), model: pick(MODELS), workload: 'chat', target: pick(TARGETS), startedAt: now };
          known.push({ f, end: book.start(f.host, f.model, f.workload, f.target) });
        } else if (r < 0.75) {
          const open = known.filter((k) => k.end);
          if (open.length === 0) continue;
          const k = pick(open);
          const how: ForwardEnd = rnd() < 0.15 ? 'refused' : 'served';
          k.end!(how);
          k.end = undefined;
          if (how === 'refused') known.splice(known.indexOf(k), 1);
          else k.f.endedAt = now;
        } else if (r < 0.9) {
          // A report arrives whose poll was sent a little while ago (but never before the previous one).
          const h = pick(HOSTS);
          // (Or none at all: a member that stopped answering; only the minute bound forgets its forwards.)
          if (rnd() < 0.7) polled.set(h, Math.max(polled.get(h)!, now - Math.floor(rnd() * 300)));
          if (rnd() < 0.5) {
            book.prune((host) => polled.get(host));
            for (let i = known.length - 1; i >= 0; i--) {
              const f = known[i].f;
              if (f.endedAt !== undefined && (polled.get(f.host)! > f.endedAt || now - f.endedAt > 60_000)) known.splice(i, 1);
            }
          }
        }
        // Routing asks about every member, model and target against its latest report.
        for (const host of HOSTS) {
          for (const model of MODELS) {
            for (const target of TARGETS) {
              const p = polled.get(host)!;
              const want = tallyOf(known.filter((k) => k.f.host === host && k.f.model === model).map((k) => k.f), target, p);
              assert.deepEqual(book.tally(host, model, target, p), want, `seed ${seed}, step ${step}, ${host}/${model}/${target} against a poll at ${p}`);
              // A report that counts this node's forwards in its busy slots: every one in flight, whatever the times.
              const yours = step % 3;
              const told = tallyOf(known.filter((k) => k.f.host === host && k.f.model === model).map((k) => k.f), target, p, yours);
              assert.deepEqual(book.tally(host, model, target, p, yours), told, `seed ${seed}, step ${step}, ${host}/${model}/${target}, your_busy ${yours}`);
            }
          }
        }
        assert.equal(book.inFlightCount, known.filter((k) => k.end).length);
      }
    }
  });

  it('a report polled after an ended forward forgets it; one polled before still counts its slot as freed', () => {
    let now = 1_000;
    const book = new ForwardBook(() => now);
    const end = book.start('b', 'm', 'chat', 'chat');
    now = 1_100;
    assert.deepEqual(book.tally('b', 'm', 'chat', 1_050), { deducted: 0, freed: 0 }); // the report polled at 1,050 shows it busy
    assert.deepEqual(book.tally('b', 'm', 'chat', 900), { deducted: 1, freed: 0 }); // one polled before it started cannot know it
    end('served');
    assert.deepEqual(book.tally('b', 'm', 'chat', 1_050), { deducted: 0, freed: 1 });
    assert.equal(book.inFlight('b', 'm'), false);
    book.prune(() => 1_200);
    assert.deepEqual(book.tally('b', 'm', 'chat', 1_050), { deducted: 0, freed: 0 });
  });

  describe('against a report that counts this node’s own forwards (your_busy)', () => {
    const descriptor = { workloads: ['chat', 'completion'], audio: false };
    const KEY = descriptorKey(descriptor);
    /** B's one slot as this node sees it: a report polled at `polledAt` with `busy` and, when told, `yours`. */
    const freeOnB = (book: ForwardBook, polledAt: number, busy: number, yours?: number) => {
      const target: TargetView = { descriptor, slots: 1, busy, ...(yours !== undefined ? { yourBusy: yours } : {}) };
      const b: HostView = { name: 'b', local: false, rttMs: 1, fresh: true, polledAt, models: new Map([['m', { targets: [target], slots: 1, busy }]]) };
      return candidates({ hosts: [b], forwards: book.tally, marks: book.marks }, 'm', 'chat')[0].free;
    };

    it('a forward sent just before a held report was answered is not counted free: without the count it was, twice', () => {
      let now = 1_000;
      const book = new ForwardBook(() => now);
      // The queue's head is sent to B's slot the moment this node's earlier forward there ends...
      book.start('b', 'm', 'chat', KEY)('served');
      now = 1_001;
      book.start('b', 'm', 'chat', KEY);
      // ...and B's held report, made when that slot freed and before the new forward arrived, is timed (half an RTT
      // before it came) after the new forward started: the times say the report saw it, and B looks free for the next.
      assert.equal(freeOnB(book, 1_002, 0), 1, 'the times alone: free (the next waiter is sent too, and one is refused)');
      // B says none of its busy slots were this node's: the forward in flight is counted against it.
      assert.equal(freeOnB(book, 1_002, 0, 0), 0);
    });

    it('a forward that ended since the report frees its slot at once; one the report already saw end is not freed again', () => {
      let now = 1_000;
      const book = new ForwardBook(() => now);
      const end = book.start('b', 'm', 'chat', KEY);
      now = 1_100;
      // B reports the slot busy, with this forward in it.
      assert.equal(freeOnB(book, 1_050, 1, 1), 0);
      end('served');
      assert.equal(freeOnB(book, 1_050, 1, 1), 1, 'ended since the report: free at once');
      // Another node's forward holds B's slot: this node's end does not free it.
      assert.equal(freeOnB(book, 1_050, 1, 0), 0);
      // A report made as the slot freed, timed before the end reached this node: free once, not twice.
      const again = book.start('b', 'm', 'chat', KEY);
      now = 1_200;
      again('served');
      assert.equal(freeOnB(book, 1_150, 0, 0), 1);
      book.start('b', 'm', 'chat', KEY);
      assert.equal(freeOnB(book, 1_150, 0, 0), 0, 'the one slot, taken by the forward just sent');
    });
  });
});

