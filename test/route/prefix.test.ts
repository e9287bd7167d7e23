/**
 * Issue 11, acceptance 4: the prefix-affinity rule. The key comes from the
 * system message and the first user message only (so every turn of a
 * conversation has the same key), a different system prompt gives an
 * independent key, the work is bounded on a 1 MB prompt, and in routing the
 * key yields to pins, preferences and explicit sessions and stays within the
 * speed class.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { prefixKey, PREFIX_MESSAGE_MAX, PREFIX_SCAN_MAX } from '../../src/dispatch/prefix.ts';
import { scanJsonObject } from '../../src/http/json-scan.ts';
import { decide } from '../../src/route/decide.ts';
import type { Candidate, RouteRequest } from '../../src/route/types.ts';

function key(doc: unknown, path = '/v1/chat/completions'): string | undefined {
  const body = Buffer.from(JSON.stringify(doc));
  const s = scanJsonObject(body);
  assert.ok(s.ok);
  return prefixKey(body, s.object, path);
}

const sys = (t: string) => ({ role: 'system', content: t });
const user = (t: string) => ({ role: 'user', content: t });
const asst = (t: string) => ({ role: 'assistant', content: t });

describe('the prefix key', () => {
  it('is the same for every turn of a conversation', () => {
    const t1 = key({ model: 'm', messages: [sys('be brief'), user('hello')] });
    const t2 = key({ model: 'm', messages: [sys('be brief'), user('hello'), asst('hi'), user('more')] });
    const t3 = key({ model: 'm', stream: true, messages: [sys('be brief'), user('hello'), asst('hi'), user('more'), asst('ok'), user('bye')] });
    assert.ok(t1);
    assert.equal(t2, t1);
    assert.equal(t3, t1);
  });

  it('differs with a different system prompt or first question; a prompt-less request has none', () => {
    const base = key({ model: 'm', messages: [sys('be brief'), user('hello')] });
    assert.notEqual(key({ model: 'm', messages: [sys('be verbose'), user('hello')] }), base);
    assert.notEqual(key({ model: 'm', messages: [sys('be brief'), user('hello!')] }), base);
    assert.equal(key({ model: 'm', messages: [] }), undefined);
    assert.equal(key({ model: 'm', input: 'embed me' }, '/v1/embeddings'), undefined);
  });

  it('keys completions on the first bytes of the prompt', () => {
    const a = key({ model: 'm', prompt: `${'x'.repeat(3000)} one` }, '/v1/completions');
    const b = key({ model: 'm', prompt: `${'x'.repeat(3000)} two` }, '/v1/completions');
    assert.ok(a);
    assert.equal(a, b);
    assert.notEqual(key({ model: 'm', prompt: 'y' }, '/v1/completions'), a);
  });

  it('reads a bounded start of a 1 MB prompt: what lies past the bound does not change the key', () => {
    const big = 'z'.repeat(1024 * 1024);
    const k1 = key({ model: 'm', messages: [sys(big + 'A'), user('q')] });
    const k2 = key({ model: 'm', messages: [sys(big + 'B'), user('q')] });
    assert.equal(k1, k2, `only the first ${PREFIX_MESSAGE_MAX} bytes of a message are hashed`);
    // 10,000 messages before the first user message: only the first few are looked at.
    const many = Array.from({ length: 10_000 }, (_, i) => asst(`m${i}`));
    assert.equal(key({ model: 'm', messages: [...many, user('late')] }), undefined);
  });

  it('walks at most PREFIX_SCAN_MAX bytes of the messages, however many escaped quotes a message holds', () => {
    // A system prompt of escaped quotes (each one a stop for the string scan) longer than the walk: no user message is in reach, so no key.
    const quotes = '"'.repeat(PREFIX_SCAN_MAX);
    assert.equal(key({ model: 'm', messages: [sys(quotes), user('q')] }), undefined);
    // Within the walk, a quote-heavy system prompt still keys, on its first bytes.
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
  it('never sends a conversation to a host slower than the speed class allows', () => {
    const winner = (decide(hosts, req(), opts) as { host: string }).host;
    const slowWinner = hosts.map((c) => (c.host === winner ? { ...c, overheadMs: 1000, ratePer1k: 10 } : { ...c, overheadMs: 100, ratePer1k: 10 }));
    const d = decide(slowWinner, req(), opts) as { host: string; reason: string };
    assert.notEqual(d.host, winner);
    assert.equal(d.reason, 'prefix');
  });
});
