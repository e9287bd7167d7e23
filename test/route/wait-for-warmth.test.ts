/**
 * A request waits for a full host only for its own sake (issue 42): when
 * that host's warm cache makes this request's first token come sooner,
 * even after the weighed wait, than on any free host. A free host's
 * eviction (the re-prefill it may cost another conversation later) chooses
 * among free hosts; it never keeps a request in the queue while a slot is
 * free, for a full host's slot that frees holds a live conversation too.
 * Before, on Mooncake's trace, entries held requests in their queues for
 * full hosts while slots stood free elsewhere (0.5-0.9 s a request).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { CacheDigest, ChainLink, PrefixChain, SlotHold } from '../../src/prompt/held.ts';
import { decide } from '../../src/route/decide.ts';
import { price } from '../../src/route/price.ts';
import type { Candidate, HostView } from '../../src/route/types.ts';
import { warmCandidates } from '../../src/route/warmth.ts';

const link = (hash: string, tokens: number): ChainLink => ({ hash: hash.padEnd(16, '0'), tokens }) as ChainLink;
const SYSTEM = link('5', 500);
/** A conversation's prompt: the shared system link, then its own. */
const conversation = (id: string, tokens: number): PrefixChain => [SYSTEM, link(id, tokens)] as PrefixChain;
const holding = (id: string, tokens: number, busy: boolean, idleSince?: number): SlotHold => ({
  last: link(id, tokens),
  head: SYSTEM,
  unique: tokens - SYSTEM.tokens,
  busy,
  ...(idleSince !== undefined ? { idleSince } : {}),
});

const host = (name: string, slots: SlotHold[]): HostView => {
  const digest: CacheDigest = { version: 1, held: new Map([[SYSTEM.hash, SYSTEM.tokens], ...slots.map((s) => [s.last!.hash, s.last!.tokens] as [string, number])]), slots };
  const busy = slots.filter((s) => s.busy).length;
  return {
    name,
    local: false,
    rttMs: 1,
    fresh: true,
    polledAt: 1000,
    models: new Map([['m', { targets: [{ descriptor: { workloads: ['chat', 'completion'], audio: false }, slots: slots.length, busy, digest }], slots: slots.length, busy }]]),
  };
};
const cand = (name: string, free: number, over: Partial<Candidate> = {}): Candidate => ({
  host: name,
  local: false,
  fresh: true,
  healthy: true,
  loading: false,
  free,
  rttMs: 1,
  bestTarget: 'chat,completion',
  overheadMs: 50,
  ratePer1k: 150,
  ...over,
});
/** Every conversation returns: what a fleet of agents and chats looks like from its slots. */
const alwaysBack = () => 1;
const NOW = 5000;
/** What warmCandidates reads for a prompt `chain` over `hosts` at NOW (no routes of this node remembered). */
const warmth = (hosts: HostView[], chain: PrefixChain, chance: (idleMs: number) => number = alwaysBack) => ({ hosts, model: 'm', workload: 'chat', chain, memory: { held: () => 0 }, now: NOW, chance });

describe('a request waits for a full host only when that saves its own time (issue 42)', () => {
  it('a new conversation runs on the free host that evicts a live one, rather than waiting for a full host that holds nothing more of it', () => {
    // Host "full": both slots busy with live 8k-token conversations, one about to free.
    const full = host('full', [holding('a', 8000, true), holding('b', 8000, true)]);
    // Host "free": one idle slot holding a live 8k-token conversation just answered, one busy.
    const free = host('free', [holding('c', 8000, false, NOW), holding('d', 8000, true)]);
    const chain = conversation('new', 6000);
    const cands = warmCandidates([cand('full', 0, { releaseMs: 300 }), cand('free', 1)], warmth([full, free], chain));
    const priced = new Map(price(cands, 6000)!.map((x) => [x.c.host, x]));
    assert.ok(priced.get('free')!.evictMs > 1000, 'the free host pays for the live conversation its idle slot holds');
    assert.ok(priced.get('full')!.score < priced.get('free')!.score, 'and so prices above the full one, wait included');
    const d = decide(cands, { model: 'm', workload: 'chat', promptTokens: 6000, prefer: [] }, { performance: true, random: () => 0.5, roundRobin: 0 });
    assert.equal(d.kind, 'run', `a slot is free: the request runs, it does not queue (${JSON.stringify(d)})`);
    assert.equal(d.kind === 'run' && d.host, 'free');
  });

  it('a full host that holds this conversation warm is still waited for when it saves more than the wait', () => {
    // A 30k-token document this prompt shares with a request running on "warm" is held there only (its busy links
    // count for a full host: the request takes the slot that frees, SPEC 9.6); "cold" has a free slot holding nothing of it.
    const doc = link('d0c', 30_000);
    const warm = host('warm', [{ last: link('x', 31_000), head: SYSTEM, unique: 500, busy: true }, holding('y', 2000, true)]);
    const digestWarm = warm.models.get('m')!.targets![0].digest as CacheDigest;
    (digestWarm.held as Map<string, number>).set(doc.hash, doc.tokens);
    const cold = host('cold', [holding('c', 2000, false, NOW - 60_000), holding('e', 2000, true)]);
    const chain = [SYSTEM, doc, link('q', 30_200)] as PrefixChain;
    const cands = warmCandidates([cand('warm', 0, { releaseMs: 200 }), cand('cold', 1)], warmth([warm, cold], chain, (idle) => (idle > 30_000 ? 0 : 1)));
    const d = decide(cands, { model: 'm', workload: 'chat', promptTokens: 30_200, prefer: [] }, { performance: true, random: () => 0.5, roundRobin: 0 });
    assert.equal(d.kind, 'wait', `30k tokens held warm are worth a 200 ms wait (${JSON.stringify(d)})`);
    assert.equal(d.kind === 'wait' && d.host, 'warm');
  });
});

describe("a conversation's next turn finds the slot of its previous turn free, though the poll showed it busy (issue 42)", () => {
  // The previous turn's prompt, still running at the poll; the next turn continues it.
  const previous = conversation('p', 3000);
  const next = [...previous, link('n', 3200)] as PrefixChain;
  const inputs = (hosts: HostView[], chain: PrefixChain) => warmth(hosts, chain);

  it('a member that looked full runs the next turn in that slot, its whole previous prompt cached', () => {
    const home = host('home', [holding('p', 3000, true), holding('o', 2000, true)]);
    const [c] = warmCandidates([cand('home', 0, { releaseMs: 400 })], inputs([home], next));
    assert.equal(c.free, 1, 'the slot of the previous turn is idle now: its answer came before this turn was sent');
    assert.equal(c.slot, 0, 'named, so the executor takes it');
    assert.equal(c.cached, 3000);
    const d = decide([c, cand('other', 1)], { model: 'm', workload: 'chat', promptTokens: 3200, sessionKey: 'k', prefer: [] }, { performance: true, random: () => 0.5, roundRobin: 0 });
    assert.equal(d.kind === 'run' && d.host, 'home', JSON.stringify(d));
  });

  it('stays full when its busy slots hold other conversations, or when it is this node itself (its own view is of now)', () => {
    const busyWithOthers = host('home', [holding('o', 3000, true), holding('q', 2000, true)]);
    assert.equal(warmCandidates([cand('home', 0)], inputs([busyWithOthers], next))[0].free, 0);
    const self = Object.assign(host('home', [holding('p', 3000, true), holding('o', 2000, true)]), { local: true });
    assert.equal(warmCandidates([cand('home', 0, { local: true })], inputs([self], next))[0].free, 0);
  });

  it('stays full for the same prompt running there (a duplicate is no next turn), and once it refused a forward of this node', () => {
    const home = host('home', [holding('p', 3000, true), holding('o', 2000, true)]);
    assert.equal(warmCandidates([cand('home', 0)], inputs([home], previous))[0].free, 0, 'the very prompt that runs there');
    assert.equal(warmCandidates([cand('home', 0, { refused: true })], inputs([home], next))[0].free, 0, 'refused since the poll: full until a forward there ends');
  });
});
