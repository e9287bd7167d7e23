/**
 * Issue 11, acceptance 4, rewritten for issue 17: the prefix key is the
 * prefix chain's first boundary — tools and system (with neither, the first
 * message; completions, the first KiB) — so every turn of a conversation
 * and every conversation sharing a system prompt has the same key, a
 * different system prompt gives an independent key, the work is bounded,
 * and in routing the key yields to pins, preferences and explicit sessions.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { prefixKey } from '../../src/dispatch/entry/prefix.ts';
import { endpointFor, promptDialectOf } from '../../src/workloads/workloads.ts';
import { scanJsonObject } from '../../src/http/json-scan.ts';
import { decide } from '../../src/route/decide.ts';
import { CHAIN_WALK_MAX } from '../../src/prompt/chain.ts';
import type { Candidate, RouteRequest } from '../../src/route/types.ts';

function key(doc: unknown, path = '/v1/chat/completions'): string | undefined {
  const body = Buffer.from(JSON.stringify(doc));
  const s = scanJsonObject(body);
  assert.ok(s.ok);
  return prefixKey(body, s.object, promptDialectOf(endpointFor(path)!));
}

const sys = (t: string) => ({ role: 'system', content: t });
const user = (t: string) => ({ role: 'user', content: t });
const asst = (t: string) => ({ role: 'assistant', content: t });

describe('the prefix key', () => {
  it('is the same for every turn of a conversation, and for conversations sharing a system prompt', () => {
    const t1 = key({ model: 'm', messages: [sys('be brief'), user('hello')] });
    const t2 = key({ model: 'm', messages: [sys('be brief'), user('hello'), asst('hi'), user('more')] });
    const t3 = key({ model: 'm', stream: true, messages: [sys('be brief'), user('hello'), asst('hi'), user('more'), asst('ok'), user('bye')] });
    assert.ok(t1);
    assert.equal(t2, t1);
    assert.equal(t3, t1);
    assert.equal(key({ model: 'm', messages: [sys('be brief'), user('other')] }), t1);
  });

  it('differs with a different system prompt (or, without one, first message); a prompt-less request has none', () => {
    const base = key({ model: 'm', messages: [sys('be brief'), user('hello')] });
    assert.notEqual(key({ model: 'm', messages: [sys('be verbose'), user('hello')] }), base);
    const noSys = key({ model: 'm', messages: [user('hello'), asst('hi'), user('more')] });
    assert.equal(key({ model: 'm', messages: [user('hello')] }), noSys);
    assert.notEqual(key({ model: 'm', messages: [user('hello!')] }), noSys);
    assert.equal(key({ model: 'm', messages: [] }), undefined);
    assert.equal(key({ model: 'm', input: 'embed me' }, '/v1/embeddings'), undefined);
  });

  it('keys completions on the first KiB of the prompt', () => {
    const a = key({ model: 'm', prompt: `${'x'.repeat(3000)} one` }, '/v1/completions');
    const b = key({ model: 'm', prompt: `${'x'.repeat(3000)} two` }, '/v1/completions');
    assert.ok(a);
    assert.equal(a, b);
    assert.notEqual(key({ model: 'm', prompt: 'y' }, '/v1/completions'), a);
  });

  it('walks a bounded start of the body, however many escaped quotes a message holds', () => {
    // A system prompt of escaped quotes (each one a stop for the string scan) longer than the walk: no boundary is in reach, so no key.
    const quotes = '"'.repeat(CHAIN_WALK_MAX);
    assert.equal(key({ model: 'm', messages: [sys(quotes), user('q')] }), undefined);
    const k1 = key({ model: 'm', messages: [sys('"'.repeat(1000) + 'A'), user('q')] });
    assert.ok(k1);
    assert.notEqual(k1, key({ model: 'm', messages: [sys('"'.repeat(1000) + 'B'), user('q')] }));
  });
});

function cand(host: string, over: Partial<Candidate> = {}): Candidate {
  return { host, local: false, fresh: true, healthy: true, loading: false, free: 1, rttMs: 0, bestTarget: 'chat,completion', ...over };
}
const opts = { performance: true, random: () => 0.5, roundRobin: 0 };
const req = (over: Partial<RouteRequest> = {}): RouteRequest => ({ model: 'm', workload: 'chat', promptTokens: 100, prefer: [], prefixKey: 'p:abc', ...over });

describe('prefix affinity in routing', () => {
  const hosts = [cand('a'), cand('b'), cand('c'), cand('d')];
  it('routes by the key, the same from any entry node (the order of candidates does not matter)', () => {
    const d1 = decide(hosts, req(), opts);
    const d2 = decide([...hosts].reverse().map((c) => ({ ...c, local: c.host === 'c' })), req(), opts);
    assert.equal(d1.kind === 'run' && d1.reason, 'prefix');
    assert.equal(d1.kind === 'run' && d1.host, d2.kind === 'run' && d2.host);
  });
  it('yields to a pin, a preference and an explicit session', () => {
    assert.equal((decide(hosts, req({ pin: 'd' }), opts) as { reason: string }).reason, 'pinned');
    assert.equal((decide(hosts, req({ prefer: ['c'] }), opts) as { reason: string }).reason, 'preferred');
    assert.equal((decide(hosts, req({ sessionKey: 's1' }), opts) as { reason: string }).reason, 'session');
  });
  it('breaks ties among equally priced hosts by the key, and yields to a clearly cheaper host', () => {
    const winner = (decide(hosts.map((c) => ({ ...c, overheadMs: 100 })), req(), opts) as { host: string }).host;
    const slowWinner = hosts.map((c) => (c.host === winner ? { ...c, overheadMs: 1000, ratePer1k: 10 } : { ...c, overheadMs: 100, ratePer1k: 10 }));
    const d = decide(slowWinner, req(), opts) as { host: string; reason: string };
    assert.notEqual(d.host, winner);
    assert.equal(d.reason, 'prefix');
  });
});
