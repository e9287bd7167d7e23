/** Moving a cache (SPEC 13): the pure parts, survive/move-plan.ts. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { HostView } from '../../src/route/types.ts';
import type { SlotHold } from '../../src/prompt/held.ts';
import { PromptSources } from '../../src/survive/slot-ram.ts';
import { MIN_MOVE_TOKENS, moveClaim, movedHeader, moveHint, moveOfHeader, moveMismatch, moveOfClaim, priceMove, worthMoving, type MoveCosts } from '../../src/survive/move-plan.ts';

const SHA = 'a'.repeat(64);
const chain = [
  { hash: '1111111111111111', tokens: 500 },
  { hash: '2222222222222222', tokens: 1800 },
  { hash: '3333333333333333', tokens: 2000 },
];

function host(name: string, slots: SlotHold[], o: { sha?: string; ctx?: number; fresh?: boolean; draining?: boolean; ram?: Map<string, number> } = {}): HostView {
  const digest = { version: 1, held: new Map<string, number>(), slots, ...(o.ram ? { ram: o.ram } : {}) };
  const m = { targets: [{ descriptor: { workloads: ['chat', 'completion'] as const, audio: false }, slots: slots.length, busy: 0, digest }], slots: slots.length, busy: 0, ctx: o.ctx ?? 4096, file: { size: 1, sha256: o.sha ?? SHA } };
  return { name, local: false, rttMs: 1, fresh: o.fresh ?? true, polledAt: 0, models: new Map([['m', m as never]]), ...(o.draining ? { draining: true } : {}) };
}

const idle = (last: { hash: string; tokens: number }): SlotHold => ({ last, unique: last.tokens, busy: false, idleSince: 0 });

describe('the move claim', () => {
  it('round-trips, names with any characters included', () => {
    const m = { from: 'gpu box;1', link: '2222222222222222', tokens: 1800 };
    assert.deepEqual(moveOfClaim(moveClaim(m)), m);
    assert.match(moveClaim(m)!, /^[\x21-\x3a\x3c-\x7e]+$/, 'a claim value: visible ASCII without ;');
  });
  it('a malformed one is no move', () => {
    for (const v of [undefined, '', 'x.2222222222222222.a', '10.22.a', '10.2222222222222222.', '10.2222222222222222.%E0%A4%A']) assert.equal(moveOfClaim(v), undefined, String(v));
  });
});

describe('moveHint: the member whose idle slot holds most of the prompt', () => {
  const to = { host: 'B', cached: 0 };
  it('names the deepest idle slot of a member with the same file and context', () => {
    const hosts = [host('A', [idle(chain[1])]), host('B', [{ unique: 0, busy: false }]), host('C', [idle(chain[0])])];
    assert.deepEqual(moveHint({ chain, model: 'm', workload: 'chat', to, hosts }), { from: 'A', link: chain[1].hash, tokens: 1800 });
  });
  it('names a slot this prompt grew out of (its last message extended): by the link before its last', () => {
    const grown = { last: { hash: '9999999999999999', tokens: 1900 }, prev: chain[1], head: chain[0], unique: 1900, busy: false, idleSince: 0 };
    const hosts = [host('A', [grown]), host('B', [])];
    assert.deepEqual(moveHint({ chain, model: 'm', workload: 'chat', to, hosts }), { from: 'A', link: chain[1].hash, tokens: 1800 });
  });
  it('a draining holder counts: its conversations are the ones that must move', () => {
    const hosts = [host('A', [idle(chain[2])], { draining: true }), host('B', [])];
    assert.equal(moveHint({ chain, model: 'm', workload: 'chat', to, hosts })?.from, 'A');
  });
  it("a draining holder's RAM pool counts as its slots (it brings the prompt back when asked); a serving host's does not", () => {
    const ram = new Map([[chain[2].hash, 2000]]);
    const hosts = [host('A', [idle(chain[0])], { draining: true, ram }), host('B', [])];
    assert.deepEqual(moveHint({ chain, model: 'm', workload: 'chat', to, hosts }), { from: 'A', link: chain[2].hash, tokens: 2000 });
    assert.deepEqual(moveHint({ chain, model: 'm', workload: 'chat', to, hosts: [host('A', [], { ram }), host('B', [])] }), undefined);
  });
  it('never across model files or contexts, never a busy slot, never for less than MIN_MOVE_TOKENS more', () => {
    const b = host('B', []);
    assert.equal(moveHint({ chain, model: 'm', workload: 'chat', to, hosts: [host('A', [idle(chain[2])], { sha: 'b'.repeat(64) }), b] }), undefined);
    assert.equal(moveHint({ chain, model: 'm', workload: 'chat', to, hosts: [host('A', [idle(chain[2])], { ctx: 2048 }), b] }), undefined);
    assert.equal(moveHint({ chain, model: 'm', workload: 'chat', to, hosts: [host('A', [{ ...idle(chain[2]), busy: true }]), b] }), undefined);
    assert.equal(moveHint({ chain, model: 'm', workload: 'chat', to: { host: 'B', cached: 2000 - MIN_MOVE_TOKENS + 1 }, hosts: [host('A', [idle(chain[2])]), b] }), undefined);
    assert.equal(moveHint({ chain, model: 'm', workload: 'chat', to, hosts: [host('A', [idle(chain[2])], { fresh: false }), b] }), undefined);
  });
});

describe('pricing a move against prefill', () => {
  const costs: MoveCosts = { bytesPerToken: 16 * 1024, bytesPerMs: 125_000, engineBytesPerMs: 1_000_000, prefillMsPer1k: 1500, rttMs: 1 };
  it('a CPU host moves 2k tokens rather than prefill them', () => {
    const { move, price } = worthMoving(2000, 0, costs);
    assert.ok(move, JSON.stringify(price));
    assert.equal(price.bytes, 2000 * 16 * 1024);
  });
  it('a fast host with a slow link prefills', () => {
    assert.equal(worthMoving(2000, 0, { ...costs, prefillMsPer1k: 50, bytesPerMs: 10_000 }).move, false);
  });
  it('what the host already holds is not prefilled again', () => {
    assert.equal(priceMove(2000, 1500, costs).prefillMs, 750);
    assert.equal(worthMoving(2000, 2000 - MIN_MOVE_TOKENS + 1, costs).move, false);
  });
});

describe('moveMismatch: what a slot file must share', () => {
  const mine = { sha256: SHA, context: 4096, parallel: 1, args: ['--threads', '1', '--cache-type-k', 'q8_0'], build: 'b1' };
  it('the same file, context, layout and build: none; thread counts do not matter', () => {
    assert.equal(moveMismatch(mine, { ...mine, args: ['--threads', '4', '--cache-type-k', 'q8_0'] }), undefined);
  });
  it('names what differs', () => {
    assert.match(moveMismatch(mine, { ...mine, sha256: 'b'.repeat(64) })!, /another model file/);
    assert.match(moveMismatch(mine, { ...mine, context: 2048 })!, /another context/);
    assert.match(moveMismatch(mine, { ...mine, parallel: 2 })!, /--parallel 2/);
    assert.match(moveMismatch(mine, { ...mine, args: ['--threads', '1'] })!, /KV types/);
    assert.match(moveMismatch(mine, { ...mine, build: 'b2' })!, /engine build/);
    assert.match(moveMismatch(mine, undefined)!, /no fingerprint/);
  });
});

describe('PromptSources: the engine bodies a drain recalls prompts by', () => {
  it('keeps the latest body of each prompt, within its byte bound, the oldest out first', () => {
    const s = new PromptSources(10);
    s.remember('a', { path: '/v1/chat/completions', body: Buffer.from('aaaa') });
    s.remember('b', { path: '/v1/chat/completions', body: Buffer.from('bbbb') });
    s.remember('a', { path: '/v1/chat/completions', body: Buffer.from('AAAA') });
    assert.equal(s.get('a')?.body.toString(), 'AAAA');
    s.remember('c', { path: '/v1/chat/completions', body: Buffer.from('cccc') });
    assert.equal(s.get('b'), undefined, 'the oldest out');
    assert.equal(s.bytes, 8);
    s.remember('d', { path: '/v1/chat/completions', body: Buffer.alloc(11) });
    assert.equal(s.get('d'), undefined, 'a body larger than the bound is not kept');
  });
});

describe('the X-Viiwork-Moved header', () => {
  it('round-trips a move, bytes and time unknown included; a malformed one is none', () => {
    const m = { outcome: 'moved' as const, from: 'gpu box', tokens: 1800, bytes: 14_000_000, ms: 240 };
    assert.deepEqual(moveOfHeader(movedHeader(m)), m);
    const p = { outcome: 'priced_out' as const, from: 'A', tokens: 300 };
    assert.deepEqual(moveOfHeader(movedHeader(p)), p);
    for (const v of [undefined, '', 'moved 1 2 3', 'teleported 1 - - A', ['moved 1 - - A']]) assert.equal(moveOfHeader(v), undefined, String(v));
  });
});
