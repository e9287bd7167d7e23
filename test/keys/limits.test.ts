/**
 * Limits held across the mesh (SPEC section 12): the pure admission as a
 * table, and three entry nodes' limiters sharing one owner in one process
 * (a fake clock; `send` is the owner's `receive`): admitted tokens per
 * minute stay within limit × 1.05 plus one request per node, and reach at
 * least 0.9 × the limit; a node cut off from the owner keeps to its share.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { admissionTokens, admit, cutOffLimits, minuteRetry } from '../../src/keys/limits.ts';
import { Limiter } from '../../src/keys/limiter.ts';
import type { Totals } from '../../src/keys/window.ts';

const T0 = Date.UTC(2026, 0, 10, 12, 0, 0);
const totals = (t: Partial<Totals> = {}): Totals => ({ rpm: 0, tpm: 0, day: 0, dayOf: Math.floor(T0 / 86_400_000), concurrent: 0, ...t });
const since0 = { requests: 0, tokens: 0 };
/** Wait for a condition set by a promise already running (a few turns of the event loop). */
async function waitUntil(cond: () => boolean): Promise<void> {
  for (let i = 0; i < 100 && !cond(); i++) await new Promise((r) => setImmediate(r));
  assert.ok(cond(), 'the condition never held');
}

describe('admit (pure)', () => {
  const table: [string, Parameters<typeof admit>, true | string][] = [
    ['no limits', [{}, { totals: totals(), entries: 1 }, since0, 1000, 0, 0, T0], true],
    ['rpm with room', [{ rpm: 10 }, { totals: totals({ rpm: 9 }), entries: 1 }, since0, 0, 0, 0, T0], true],
    ['rpm full', [{ rpm: 10 }, { totals: totals({ rpm: 10 }), entries: 1 }, since0, 0, 0, 0, T0], 'rpm'],
    ['tpm: a share of what is left per entry', [{ tpm: 1000 }, { totals: totals({ tpm: 400 }), entries: 3 }, { requests: 1, tokens: 150 }, 100, 0, 0, T0], 'tpm'],
    ['tpm: one request always may when it fits what is left', [{ tpm: 1000 }, { totals: totals({ tpm: 400 }), entries: 3 }, since0, 500, 0, 0, T0], true],
    ['tpm: a request larger than what is left', [{ tpm: 1000 }, { totals: totals({ tpm: 600 }), entries: 1 }, since0, 500, 0, 0, T0], 'tpm'],
    ['tokens per day', [{ tokens_per_day: 5000 }, { totals: totals({ day: 4900 }), entries: 1 }, since0, 200, 0, 0, T0], 'tokens_per_day'],
    ['concurrent: others and ours in flight', [{ concurrent: 2 }, { totals: totals({ concurrent: 1 }), entries: 2 }, since0, 0, 1, 0, T0], 'concurrent'],
    ['concurrent: one of ours ended since the report', [{ concurrent: 2 }, { totals: totals({ concurrent: 2 }), entries: 1 }, since0, 0, 1, 2, T0], true],
  ];
  for (const [name, args, want] of table) {
    it(name, () => {
      const a = admit(...args);
      if (want === true) assert.deepEqual(a, { ok: true });
      else assert.equal(!a.ok && a.limit, want);
    });
  }
  it('Retry-After: when the minute frees enough; the day: at UTC midnight', () => {
    assert.equal(minuteRetry(100, 10, 100), 6);
    assert.equal(minuteRetry(50, 10, 100), 1);
    assert.equal(minuteRetry(0, 500, 100), 60);
    const day = admit({ tokens_per_day: 10 }, { totals: totals({ day: 10 }), entries: 1 }, since0, 1, 0, 0, T0);
    assert.equal(!day.ok && day.retryAfterS, 12 * 3600);
  });
  it('a cut-off node divides the limits by the alive members it sees', () => {
    assert.deepEqual(cutOffLimits({ tpm: 60000, rpm: 10, concurrent: 2 }, 3), { tpm: 20000, rpm: 3, concurrent: 1 });
  });
  it('admission holds back the output a generation request allows', () => {
    assert.equal(admissionTokens(100, 50, true), 150);
    assert.equal(admissionTokens(100, undefined, true), 4196);
    assert.equal(admissionTokens(100, 50, false), 100);
  });
});

/** Three limiters on names a, b, c whose owner (by rendezvous) answers through its own `receive`; time moves only by `advance`. */
function fleet(down: Set<string> = new Set()) {
  let now = T0;
  const names = ['a', 'b', 'c'];
  const nodes = new Map<string, Limiter>();
  for (const self of names) {
    nodes.set(
      self,
      new Limiter({
        self,
        now: () => now,
        alive: () => names.filter((n) => n === self || !down.has(n) || !down.has(self)),
        send: async (host, reports) => (down.has(host) || down.has(self) ? undefined : nodes.get(host)!.receive(self, reports)),
      }),
    );
  }
  return { nodes, advance: (ms: number) => (now += ms), now: () => now };
}

/**
 * Entry a and owner b (a clock that stands still), and a key b owns: `flushLate` sends a's report and holds
 * b's answer back until the `answer()` it returns.
 */
function entryWithLateOwner(names: string[]) {
  const now = () => T0;
  const owner = new Limiter({ self: 'b', now, alive: () => ['a', 'b'], send: async () => undefined });
  let late = false;
  let answer: (() => void) | undefined;
  const entry = new Limiter({
    self: 'a',
    now,
    alive: () => ['a', 'b'],
    send: async (_host, reports) => {
      if (late) await new Promise<void>((r) => (answer = r));
      return owner.receive('a', reports);
    },
  });
  const key = names.find((k) => entry.ownerOf(k) === 'b')!;
  const flushLate = async () => {
    late = true;
    answer = undefined;
    const report = entry.flush([key]);
    await waitUntil(() => answer !== undefined);
    return {
      answer: async () => {
        late = false;
        answer!();
        await report;
      },
    };
  };
  return { entry, key, flushLate };
}

describe('limits across three entry nodes (one process)', () => {
  it('a tpm limit hit from three entries at once: within limit × 1.05 plus one request per node, and at least 0.9 × the limit, every minute', async () => {
    const f = fleet();
    const limit = 60_000;
    const perMinute: number[] = [];
    let admitted = 0;
    // Three clients per entry, each sending a 700-token request every 50 ms, for four minutes.
    for (let step = 0; step < (4 * 60_000) / 50; step++) {
      for (const n of f.nodes.values()) {
        for (let c = 0; c < 3; c++) {
          const a = await n.admit('k', { tpm: limit }, 700);
          if (a.ok) {
            admitted += 700;
            a.ticket.release();
          }
        }
      }
      f.advance(50);
      if (step % 2 === 1) await Promise.all([...f.nodes.values()].map((n) => n.flush()));
      if ((step + 1) % 1200 === 0) {
        perMinute.push(admitted);
        admitted = 0;
      }
    }
    if (process.env.SHOW_LIMITS) console.log(perMinute);
    for (const m of perMinute.slice(1)) {
      assert.ok(m <= limit * 1.05 + 3 * 700, `admitted ${m} in a minute`);
      assert.ok(m >= limit * 0.9, `admitted only ${m} in a minute`);
    }
  });

  it('the 429 names the limit and a Retry-After; rpm holds mesh-wide', async () => {
    const f = fleet();
    let ok = 0;
    let refusal: unknown;
    for (let i = 0; i < 30; i++) {
      for (const n of f.nodes.values()) {
        const a = await n.admit('r', { rpm: 10 }, 0);
        if (a.ok) ok++;
        else refusal = a;
      }
      f.advance(100);
      await Promise.all([...f.nodes.values()].map((n) => n.flush()));
    }
    assert.ok(ok >= 10 && ok <= 10 + 3, `${ok} admitted of rpm 10`);
    assert.deepEqual(Object.keys(refusal as object).sort(), ['limit', 'message', 'ok', 'retryAfterS']);
    assert.equal((refusal as { limit: string }).limit, 'rpm');
  });

  it('concurrent counts requests in flight on every entry, and frees as they end', async () => {
    const f = fleet();
    const tickets = [];
    for (const n of f.nodes.values()) {
      const a = await n.admit('c', { concurrent: 2 }, 0);
      if (a.ok) tickets.push(a.ticket);
      await Promise.all([...f.nodes.values()].map((x) => x.flush()));
    }
    assert.equal(tickets.length, 2);
    tickets[0].release();
    await Promise.all([...f.nodes.values()].map((x) => x.flush()));
    const again = await f.nodes.get('c')!.admit('c', { concurrent: 2 }, 0);
    assert.ok(again.ok);
  });

  it('a node cut off from the owner enforces limit ÷ the alive members it sees', async () => {
    const down = new Set<string>();
    const f = fleet(down);
    const owner = f.nodes.get('a')!.ownerOf('iso');
    const cut = ['a', 'b', 'c'].find((n) => n !== owner)!;
    down.add(cut);
    let ok = 0;
    for (let i = 0; i < 40; i++) {
      const a = await f.nodes.get(cut)!.admit('iso', { rpm: 30 }, 0);
      if (a.ok) ok++;
      f.advance(10);
    }
    // It sees only itself alive here (the fake's view of a partition), so it keeps 30 ÷ 1 — but never more.
    assert.ok(ok <= 30, `${ok}`);
  });

  it('what an entry admits while its report is on the way still counts once the answer comes back', async () => {
    const { entry, key, flushLate } = entryWithLateOwner(['k0', 'k1', 'k2', 'k3', 'k4', 'k5']);
    assert.ok((await entry.admit(key, { rpm: 4 }, 0)).ok, 'the first');
    const report = await flushLate(); // carries one request; the owner answers late
    assert.ok((await entry.admit(key, { rpm: 4 }, 0)).ok, 'the second, admitted while the report travels');
    await report.answer();
    const third = await entry.admit(key, { rpm: 4 }, 0);
    assert.equal(third.ok, false, 'a third would be over this entry’s share (4 ÷ 2 members while the key is new): the answer counted one, the entry admitted another since');
  });

  it('a request given back (the mesh never ran it) frees its request and tokens, once, also while its report travels', async () => {
    const { entry, key, flushLate } = entryWithLateOwner(['g0', 'g1', 'g2', 'g3', 'g4', 'g5']);
    const limits = { rpm: 2, tpm: 1000 };
    const first = await entry.admit(key, limits, 600);
    assert.ok(first.ok);
    const report = await flushLate(); // carries the first request; the owner answers late
    first.ticket.giveBack();
    first.ticket.giveBack();
    first.ticket.release();
    assert.deepEqual([entry.totals(key).rpm, entry.totals(key).tpm, entry.totals(key).concurrent], [0, 0, 0]);
    await report.answer();
    // The answer counts the first (its report carried it); the give-back after it is not lost.
    const second = await entry.admit(key, limits, 600);
    assert.ok(second.ok, 'the tokens of the request given back are free again');
    second.ticket.release();
    second.ticket.giveBack();
    await entry.flush([key]);
    assert.ok((await entry.admit(key, limits, 100)).ok, 'the second of rpm 2');
    assert.equal((await entry.admit(key, limits, 100)).ok, false, 'a third is over rpm 2: a give-back after release changes nothing');
  });

  it('an entry whose owner stops answering keeps to what the last answer said the mesh had spent, as well as its share', async () => {
    let now = T0;
    let ownerUp = true;
    const owner = new Limiter({ self: 'b', now: () => now, alive: () => ['a', 'b'], send: async () => undefined });
    const entry = new Limiter({ self: 'a', now: () => now, alive: () => ['a', 'b'], send: async (_h, reports) => (ownerUp ? owner.receive('a', reports) : undefined) });
    const key = ['k0', 'k1', 'k2', 'k3', 'k4', 'k5'].find((k) => entry.ownerOf(k) === 'b')!;
    // The owner has heard of 9 requests elsewhere: its next answer to this entry says the mesh spent them.
    owner.receive('c', [{ key, totals: { rpm: 9, tpm: 0, day: 0, dayOf: Math.floor(T0 / 86_400_000), concurrent: 0 }, demand: true }]);
    assert.ok((await entry.admit(key, { rpm: 10 }, 0)).ok, 'the tenth');
    ownerUp = false;
    now += 1500; // the answer is stale, the owner silent: cut off, this entry's own share (10 ÷ 2) alone would admit
    const after = await entry.admit(key, { rpm: 10 }, 0);
    assert.equal(after.ok, false, 'the last answer said the minute was spent');
    now += 60_000; // long after: that answer is forgotten, and the share on its own totals rules
    assert.ok((await entry.admit(key, { rpm: 10 }, 0)).ok);
  });

  it('a gateway admits and an executor settles: the settlement reaches the key’s minute, and the executor takes no share', async () => {
    // a: the entry (a gateway with no engines) admits; c: the executor runs the forwards and settles them from the engine's
    // usage. c's window then holds only differences, below zero when the engine used less than was held back.
    const f = fleet();
    const a = f.nodes.get('a')!;
    const c = f.nodes.get('c')!;
    const key = 'gw';
    const limits = { tpm: 10_000 };
    const first = await a.admit(key, limits, 4097);
    assert.ok(first.ok);
    first.ticket.release();
    f.advance(2500); // past the owner's first two seconds of a new key, when every member counts as an entry
    const small = await a.admit(key, limits, 1); // a is still sending: its demand is fresh at the owner
    assert.ok(small.ok);
    small.ticket.release();
    c.settle(key, 1007 - 4097, f.now() - 2500); // the engine used 1,007 of the 4,097 held
    await c.flush([key]);
    await a.flush([key]);
    // The mesh spent 1,007 and a is the key’s only entry: two of 4,400 fit. (Clamped at c, the minute read 4,097 and
    // the second would not fit; had c's settlement counted as demand, a's share would be half of what is left, 4,496.)
    for (const n of [1, 2]) {
      const r = await a.admit(key, limits, 4400);
      assert.ok(r.ok, `request ${n} of 4,400 after 1,007 spent of 10,000: ${JSON.stringify(r)}`);
      r.ticket.release();
    }
    assert.equal((await a.admit(key, limits, 300)).ok, false, 'the limit still holds: 1,007 + 1 + 8,800 + 300 > 10,000');
  });

  it('counters survive a restart (state_dir)', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'viiwork-limits-'));
    const now = () => T0;
    const one = new Limiter({ self: 'a', now, alive: () => ['a'], send: async () => undefined, stateDir: dir });
    for (let i = 0; i < 3; i++) await one.admit('p', { rpm: 3 }, 10);
    one.stop();
    const two = new Limiter({ self: 'a', now, alive: () => ['a'], send: async () => undefined, stateDir: dir });
    assert.equal(two.totals('p').rpm, 3);
    const a = await two.admit('p', { rpm: 3 }, 10);
    assert.equal(a.ok, false);
  });
});

describe('the sliding minute (keys/window.ts)', () => {
  it('a settlement counted in the second its run began expires with the estimate; counted on arrival it outlives it', async () => {
    const { addTokens, addTokensAt, emptyWindow, minuteTotal } = await import('../../src/keys/window.ts');
    const start = T0 + 900; // late in a second: the answer's usage comes in the next one
    const w = emptyWindow(start);
    addTokens(w, start, 330); // admitted: prompt estimate + max_tokens
    addTokensAt(w, start, start + 300, -162); // settled 300 ms later: it used 168
    assert.equal(minuteTotal(w.tokens, start + 300), 168);
    // Once the admission's second has left the window, so has its correction: a new admission counts whole.
    addTokens(w, T0 + 61_050, 330);
    assert.equal(minuteTotal(w.tokens, T0 + 61_050), 330);
    assert.equal(w.dayTokens, 168 + 330);
    // Counted on arrival, in the next second, the correction outlived the estimate and hid 162 tokens of a new admission.
    const old = emptyWindow(start);
    addTokens(old, start, 330);
    addTokens(old, start + 300, -162);
    addTokens(old, T0 + 61_050, 330);
    assert.equal(minuteTotal(old.tokens, T0 + 61_050), 168, 'the flaw the dated settlement removes');
  });

  it('whatever part of its second it came in, an admission counts for a full minute after it', async () => {
    const { addTokens, emptyWindow, minuteTotal } = await import('../../src/keys/window.ts');
    const w = emptyWindow(T0);
    addTokens(w, T0 + 900, 1000); // 12:00:00.9
    assert.equal(minuteTotal(w.tokens, T0 + 59_950), 1000, '59.05 s later');
    assert.equal(minuteTotal(w.tokens, T0 + 60_850), 1000, '59.95 s later: a 60-bucket ring had dropped it 0.9 s early');
    assert.equal(minuteTotal(w.tokens, T0 + 61_000), 0, '60.1 s later');
  });

  it('a correction for a second already out of the minute changes only the day', async () => {
    const { addTokens, addTokensAt, emptyWindow, minuteTotal } = await import('../../src/keys/window.ts');
    const w = emptyWindow(T0);
    addTokens(w, T0, 500);
    addTokensAt(w, T0, T0 + 62_000, -200);
    addTokens(w, T0 + 62_000, 100);
    assert.equal(minuteTotal(w.tokens, T0 + 62_000), 100);
    assert.equal(w.dayTokens, 400);
  });

  it('a state file written with a 60-bucket minute loads, each second in its place', async () => {
    const { minuteTotal, parseWindow } = await import('../../src/keys/window.ts');
    const s0 = Math.floor(T0 / 1000);
    const stamps = new Array(60).fill(-1);
    const counts = new Array(60).fill(0);
    stamps[s0 % 60] = s0;
    counts[s0 % 60] = 700;
    stamps[(s0 + 30) % 60] = s0 + 30;
    counts[(s0 + 30) % 60] = 50;
    const w = parseWindow({ requests: { stamps, counts }, tokens: { stamps, counts }, day: Math.floor(T0 / 86_400_000), dayTokens: 750 });
    assert.ok(w);
    assert.equal(minuteTotal(w.tokens, T0 + 40_000), 750);
    assert.equal(minuteTotal(w.tokens, T0 + 75_000), 50);
    assert.equal(w.tokens.stamps.length, 61);
  });
});

describe('who owns a key (mesh/members.ts limitOwners)', () => {
  it('a member one node suspects still owns its keys there, so two nodes never choose different owners over a missed probe', async () => {
    const { limitOwners } = await import('../../src/mesh/members.ts');
    const peer = (name: string, state: 'alive' | 'suspect' | 'dead' | 'left', role: 'node' | 'foreign' = 'node') => ({ name, state, role });
    assert.deepEqual(limitOwners('a', [peer('b', 'alive'), peer('c', 'suspect'), peer('d', 'dead'), peer('e', 'left'), peer('f', 'alive', 'foreign')]), ['a', 'b', 'c']);
    // Node a sees c alive, node b suspects it: the same owner for every key.
    const seenByA = new Limiter({ self: 'a', now: () => T0, alive: () => limitOwners('a', [peer('b', 'alive'), peer('c', 'alive')]), send: async () => undefined });
    const seenByB = new Limiter({ self: 'b', now: () => T0, alive: () => limitOwners('b', [peer('a', 'alive'), peer('c', 'suspect')]), send: async () => undefined });
    const keys = Array.from({ length: 60 }, (_, i) => `key-${i}`);
    assert.ok(keys.some((k) => seenByA.ownerOf(k) === 'c'), 'c owns some keys');
    for (const k of keys) assert.equal(seenByB.ownerOf(k), seenByA.ownerOf(k), k);
  });
});
