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
import { tallyOf } from '../../src/route/eligibility.ts';
import type { ForwardRecord } from '../../src/route/types.ts';
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
});
