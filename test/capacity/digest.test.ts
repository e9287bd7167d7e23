/** Issue 17, item 2: the cache digest on the wire, its bounds and its versioned resending; release_ms. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decodeLinks, decodeSlots, encodeDigest, encodeSlots, parseHeld, readWire, DIGEST_MAX_BYTES } from '../../src/capacity/digest.ts';
import { parseReport, resolveDigests, digestKey } from '../../src/capacity/poller.ts';
import { engineCachedTokens, usageOfBody } from '../../src/http/engine-usage.ts';
import { releaseEstimate, nextMeanBusy } from '../../src/engines/release.ts';

const hex = (i: number) => i.toString(16).padStart(16, '0');

describe('digest wire format', () => {
  it('slot state (issue 25): what each slot holds, busy or idle for how long, empty; idle times become moments on the reader’s clock', () => {
    const slots = [
      { last: { hash: hex(7), tokens: 27000 }, unique: 19000, busy: false, idleSince: 10_000 },
      { last: { hash: hex(8), tokens: 9000 }, unique: 1000, busy: true },
      { unique: 0, busy: false },
    ];
    const wire = encodeSlots(slots, 12_500);
    assert.deepEqual(wire, [[hex(7), 27000, 19000, 2500], [hex(8), 9000, 1000, -1], ['', 0, 0, 0]]);
    // Through JSON, as a report travels; read by a node whose poll left at 50,000 on its own clock.
    const read = decodeSlots(JSON.parse(JSON.stringify(wire)), 50_000);
    assert.deepEqual(read, [
      { last: { hash: hex(7), tokens: 27000 }, unique: 19000, busy: false, idleSince: 47_500 },
      { last: { hash: hex(8), tokens: 9000 }, unique: 1000, busy: true },
      { unique: 0, busy: false, idleSince: 50_000 },
    ]);
    for (const bad of [[['zz', 1, 1, 1]], [[hex(1), 'x', 1, 1]], [[hex(1), 1, 1]], 'slots', Array(200).fill(['', 0, 0, 0])]) assert.equal(decodeSlots(bad, 0), undefined, JSON.stringify(bad).slice(0, 40));
    // A report's digest with slots parses; with malformed slots, its links still serve.
    assert.deepEqual(readWire({ v: 3, links: '', slots: wire })?.slots, wire);
  });

  it('round-trips which links only busy slots hold', () => {
    const w = encodeDigest(3, [
      { hash: hex(1), tokens: 900, busy: true },
      { hash: hex(2), tokens: 300 },
      { hash: hex(3), tokens: 2 ** 30, busy: true },
    ]);
    const d = decodeLinks(3, w.links!)!;
    assert.deepEqual([...d.held.entries()], [[hex(1), 900], [hex(2), 300], [hex(3), 2 ** 30]]);
    assert.deepEqual([...(d.busy ?? [])], [hex(1), hex(3)]);
    assert.equal(decodeLinks(4, encodeDigest(4, [{ hash: hex(2), tokens: 300 }]).links!)!.busy, undefined, 'none busy: no set');
  });

  it('round-trips links most recently used first, with their tokens', () => {
    const links = [
      { hash: hex(3), tokens: 5000 },
      { hash: hex(2), tokens: 127 },
      { hash: hex(1), tokens: 128 },
      { hash: 'ffffffffffffffff', tokens: 0 },
    ];
    const w = encodeDigest(7, links);
    const d = decodeLinks(w.v, w.links!)!;
    assert.equal(d.version, 7);
    assert.deepEqual([...d.held.entries()], links.map((l) => [l.hash, l.tokens]));
  });

  it('stays within 1,024 links and 16 KiB per target, keeping the most recent', () => {
    const links = Array.from({ length: 5000 }, (_, i) => ({ hash: hex(i + 1), tokens: 100_000 + i }));
    const w = encodeDigest(1, links);
    assert.ok(JSON.stringify(w).length <= DIGEST_MAX_BYTES, `${JSON.stringify(w).length} bytes`);
    const d = decodeLinks(1, w.links!)!;
    assert.equal(d.held.size, 1024);
    assert.ok(d.held.has(hex(1)) && !d.held.has(hex(1025)));
    // A smaller bound cuts the least recently used.
    const small = decodeLinks(1, encodeDigest(1, links, 400).links!)!;
    assert.ok(small.held.size > 10 && small.held.size < 40 && small.held.has(hex(1)));
  });

  it('4 slots × 50 links: the size a realistic target sends', () => {
    const links = Array.from({ length: 200 }, (_, i) => ({ hash: hex(i + 1), tokens: 200 * (i % 50) + 1500 }));
    const bytes = JSON.stringify(encodeDigest(123456, links)).length;
    assert.ok(bytes < 3100, `${bytes} bytes`);
  });

  it('malformed digests are ignored, never trusted', () => {
    assert.equal(decodeLinks(1, Buffer.from([1, 2, 3]).toString('base64')), undefined, 'a truncated record');
    assert.equal(decodeLinks(1, Buffer.alloc(8 + 7, 0xff).toString('base64')), undefined, 'a varint that never ends');
    assert.equal(readWire({ v: -1 }), undefined);
    assert.equal(readWire({ v: 1, links: 5 }), undefined);
    assert.deepEqual(readWire({ v: 3 }), { v: 3 });
    assert.equal(parseHeld('zz.1'), undefined);
    assert.deepEqual(parseHeld('a1b2c3d4.42'), { epoch: 'a1b2c3d4', version: 42 });
  });
});

describe('versioned resending (the poller side)', () => {
  const full = (v: number, links: string) => ({
    node: 'x',
    digest_epoch: 'abcd1234',
    digest_version: v,
    models: [{ name: 'm', slots: 1, busy: 1, targets: [{ workloads: ['chat', 'completion'], audio: false, slots: 1, busy: 1, release_ms: 850, digest: { v, ...(links ? { links } : {}) } }] }],
  });
  const key = digestKey('m', ['completion', 'chat'], false);

  it('an unchanged digest ({"v"} alone) is carried over from the report before; one it cannot resolve asks for everything again', () => {
    const links = encodeDigest(5, [{ hash: hex(9), tokens: 300 }]).links!;
    const first = parseReport(full(5, links), 'x');
    assert.ok(typeof first !== 'string');
    assert.equal(first.models[0].targets![0].release_ms, 850);
    const r1 = resolveDigests(first, undefined);
    assert.ok(r1.complete);
    assert.equal(r1.digests.get(key)?.held.get(hex(9)), 300);

    const second = parseReport(full(5, ''), 'x');
    assert.ok(typeof second !== 'string');
    const r2 = resolveDigests(second, r1.digests);
    assert.ok(r2.complete);
    assert.equal(r2.digests.get(key), r1.digests.get(key), 'the same digest, not decoded again');

    const unknown = parseReport(full(6, ''), 'x');
    assert.ok(typeof unknown !== 'string');
    const r3 = resolveDigests(unknown, r1.digests);
    assert.equal(r3.complete, false, 'a version it does not hold: the next poll asks for everything');
    assert.equal(r3.digests.has(key), false);
  });
});

describe("the engine's cached-token count", () => {
  it('cached_tokens, else cache_n, else prompt tokens − prompt_n; nothing when the engine says nothing', () => {
    const cases: [object, number | undefined][] = [
      [{ usage: { prompt_tokens: 100, prompt_tokens_details: { cached_tokens: 60 } }, timings: { prompt_n: 10, cache_n: 90 } }, 60],
      [{ usage: { prompt_tokens: 100 }, timings: { prompt_n: 10, cache_n: 90 } }, 90],
      [{ usage: { prompt_tokens: 143 }, timings: { prompt_n: 45 } }, 98],
      [{ usage: { prompt_tokens: 100 } }, undefined],
      [{ choices: [] }, undefined],
    ];
    for (const [doc, want] of cases) assert.equal(engineCachedTokens(usageOfBody(Buffer.from(JSON.stringify(doc)))), want, JSON.stringify(doc));
    assert.deepEqual(usageOfBody(Buffer.from('not json')), {});
  });
});

describe('release_ms', () => {
  it('the first running request to end, by the mean busy time; overdue ones soon, not never', () => {
    const cases: [number[], number | undefined, number | undefined][] = [
      [[100, 900], 1000, 100],
      [[0], 1000, 1000],
      [[1500], 1000, 250],
      [[], 1000, undefined],
      [[100], undefined, undefined],
    ];
    for (const [elapsed, mean, want] of cases) assert.equal(releaseEstimate(elapsed, mean), want, `${elapsed} / ${mean}`);
    assert.equal(nextMeanBusy(undefined, 400), 400);
    assert.equal(nextMeanBusy(1000, 0), 800);
  });
});

describe('release_ms from the slot table', () => {
  it('absent with a free slot; with every slot busy, the estimate from the leases running and the mean lease time', async () => {
    const { SlotTable } = await import('../../src/engines/targets.ts');
    const backend = { id: 'm/0', info: { id: 'm/0', model: 'm', index: 0, parallel: 2, context: 1024, engine: 'sim' }, parallel: 2, context: 1024, descriptor: { workloads: ['chat'], audio: false }, state: 'healthy' };
    const table = new SlotTable([backend as never]);
    const target = table.targetsOf('m')[0];
    const a = table.tryLease('m', 'chat')!;
    assert.equal(table.releaseMs(target), undefined, 'a slot is free');
    a.release();
    const b = table.tryLease('m', 'chat')!;
    const c = table.tryLease('m', 'chat')!;
    const mean = performance.now() - b.grantedAt;
    const r = table.releaseMs(target, b.grantedAt + 1_000_000);
    assert.ok(r !== undefined && r >= 0, 'full: an estimate');
    assert.ok(r! <= Math.max(1, mean), `overdue leases end within the mean: ${r}`);
    b.release();
    assert.equal(table.releaseMs(target), undefined);
    c.release();
  });
});
