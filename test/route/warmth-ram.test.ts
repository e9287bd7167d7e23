/**
 * Issue 41, item 2: an entry node prices a host whose engine keeps a
 * host-RAM prompt cache by what the executor will do there: a conversation
 * pushed out of its slot into RAM is priced as cached, plus its restore, and
 * the digest carries the pool's links across the wire (SPEC section 7, "RAM
 * pool"). The executor's own prediction and the entry's agree.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decodeLinks, encodeDigest } from '../../src/capacity/digest.ts';
import { RecentRoutes } from '../../src/dispatch/entry/recent-routes.ts';
import { cacheModel, type CacheModel } from '../../src/engines/cache-model.ts';
import { scanJsonObject } from '../../src/http/json-scan.ts';
import { walkPrompt } from '../../src/prompt/chain.ts';
import type { CacheDigest, PrefixChain } from '../../src/prompt/held.ts';
import { price } from '../../src/route/price.ts';
import { chooseSlot, RESTORE_SHARE } from '../../src/route/slots.ts';
import type { Candidate, HostView } from '../../src/route/types.ts';
import { warmCandidates } from '../../src/route/warmth.ts';

function chainOf(messages: unknown[]): PrefixChain {
  const body = Buffer.from(JSON.stringify({ model: 'm', messages }));
  const s = scanJsonObject(body);
  assert.ok(s.ok);
  return walkPrompt(body, s.object, 'chat').chain;
}
const cand = (host: string): Candidate => ({ host, local: false, fresh: true, healthy: true, loading: false, free: 1, rttMs: 0, bestTarget: 'chat,completion', overheadMs: 100, ratePer1k: 1000 });
const hostWith = (name: string, digest: CacheDigest): HostView => ({
  name,
  local: false,
  rttMs: 1,
  fresh: true,
  polledAt: 1000,
  models: new Map([['m', { targets: [{ descriptor: { workloads: ['chat', 'completion'], audio: false }, slots: 1, busy: 0, digest }], slots: 1, busy: 0 }]]),
});

/** A one-slot executor that ran `turns` in order, and its digest as a poller decodes it from the wire. */
function executor(turns: PrefixChain[], pool: boolean): { m: CacheModel; digest: CacheDigest } {
  const m = cacheModel({ kind: 'chosen', slots: 1, choose: (v) => chooseSlot(v, () => 1), pool: () => (pool ? { tokens: 1_000_000 } : undefined) });
  let clock = 0;
  for (const c of turns) {
    const t = m.begin(c, ++clock, 100 * clock);
    m.finish(t, { processed: true, cachedTokens: t.predicted }, ++clock, 100 * clock);
  }
  const ramLinks = m.ramHeld?.();
  // Across the wire: the RAM pool's links packed as a digest's are, decoded by the poller.
  const ram = ramLinks && decodeLinks(1, encodeDigest(1, ramLinks).links!)?.held;
  const digest: CacheDigest = { version: 1, held: new Map(m.held().map((l) => [l.hash, l.tokens])), slots: m.slotStates!(), ...(ram ? { ram } : {}) };
  return { m, digest };
}

describe('an entry prices a host’s RAM pool (issue 41, item 2)', () => {
  const a1 = [{ role: 'user', content: 'a long first question about rivers '.repeat(40) }];
  const b1 = [{ role: 'user', content: 'another conversation entirely, on mountains '.repeat(40) }];
  const a2 = [...a1, { role: 'assistant', content: 'an answer' }, { role: 'user', content: 'and then?' }];
  const memory = new RecentRoutes(() => 500);

  it('a conversation pushed into RAM is priced cached, plus its restore, as the executor predicts', () => {
    const { m, digest } = executor([chainOf(a1), chainOf(b1)], true);
    const chain = chainOf(a2);
    const [c] = warmCandidates([cand('a')], { hosts: [hostWith('a', digest)], model: 'm', workload: 'chat', chain, memory, now: 500, chance: () => 1 });
    const exec = m.begin(chain, 99, 500);
    assert.ok(exec.predicted > 0 && exec.restored === exec.predicted, 'the executor restores it from RAM');
    assert.equal(c.cached, exec.predicted, 'the entry prices what the executor predicts');
    assert.equal(c.restored, exec.predicted);
    assert.equal(c.evicted?.pooled, true, 'what holds the slot now moves to RAM: its restore, not its re-prefill');
    const tokens = chain.at(-1)!.tokens;
    const [p] = price([c], tokens)!;
    const restoreMs = (1000 * exec.predicted * RESTORE_SHARE) / 1000;
    assert.ok(Math.abs(p.service - (100 + tokens - exec.predicted + restoreMs + p.evictMs)) < 1e-6, `service ${p.service}`);
  });

  it('without a pool the same turn is priced cold, and a host holding it in RAM wins over one that does not', () => {
    const chain = chainOf(a2);
    const none = executor([chainOf(a1), chainOf(b1)], false);
    const pooled = executor([chainOf(a1), chainOf(b1)], true);
    const cands = warmCandidates([cand('cold'), cand('ram')], { hosts: [hostWith('cold', none.digest), hostWith('ram', pooled.digest)], model: 'm', workload: 'chat', chain, memory, now: 500, chance: () => 1 });
    assert.equal(cands[0].cached, 0);
    const priced = price(cands, chain.at(-1)!.tokens)!;
    assert.ok(priced[1].score < priced[0].score, `ram ${priced[1].score} < cold ${priced[0].score}`);
  });
});
