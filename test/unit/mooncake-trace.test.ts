import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { BLOCK_TOKENS, blockText, buildMooncakeTrace, infiniteCacheBound, mooncakeMessages, prefixFamilies, readMooncake, type MooncakeRow } from '../../bench/lib/mooncake-trace.ts';
import { PrefixStickyRouter } from '../../bench/lib/prefix-sticky.ts';
import { commonPrefixTokens, renderPrompt, tokenCount } from '../../src/engines/prompt-cache.ts';

const ENGINES = [
  { name: 'fast', slots: 4, ttftMs: 40, prefillPer1k: 80, tokensPerS: 80, outputTokens: 2048 },
  { name: 'slow', slots: 8, ttftMs: 90, prefillPer1k: 250, tokensPerS: 40, outputTokens: 2048 },
];

// Every row starts with block 0 (a system prompt), as in the conversation trace; two conversations and a single shot.
const ROWS: MooncakeRow[] = [
  { timestamp: 0, input_length: 1300, output_length: 100, hash_ids: [0, 1, 2] },
  { timestamp: 0, input_length: 900, output_length: 50, hash_ids: [0, 10] },
  { timestamp: 3000, input_length: 1100, output_length: 80, hash_ids: [0, 20, 21] },
  { timestamp: 30000, input_length: 2000, output_length: 100, hash_ids: [0, 1, 3, 4] },
  { timestamp: 60000, input_length: 2500, output_length: 100, hash_ids: [0, 1, 3, 5, 6] },
  { timestamp: 63000, input_length: 1600, output_length: 120, hash_ids: [0, 20, 21, 22] },
];

test('prefix families: a request continues the one it shares the most blocks with, past the block every request shares', () => {
  const f = prefixFamilies(ROWS);
  assert.equal(f.common, 1);
  assert.deepEqual(f.parent, [-1, -1, -1, 0, 3, 2]);
  assert.equal(f.family[3], f.family[0]);
  assert.equal(f.family[4], f.family[0]);
  assert.equal(f.family[5], f.family[2]);
  assert.notEqual(f.family[1], f.family[0]);
  assert.notEqual(f.family[2], f.family[0]);
});

test('equal block ids render equal text of 512 tokens, so equal id chains are equal prompt prefixes', () => {
  assert.equal(blockText(7), blockText(7));
  assert.notEqual(blockText(7), blockText(8));
  assert.equal(tokenCount(blockText(7)), BLOCK_TOKENS);
  const a = renderPrompt(true, { messages: mooncakeMessages([0, 1, 2], 1300) })!;
  const b = renderPrompt(true, { messages: mooncakeMessages([0, 1, 3, 4], 2000) })!;
  const shared = commonPrefixTokens(a, b);
  // Two whole blocks (and their message markup), then the texts part.
  assert.ok(shared >= 2 * BLOCK_TOKENS && shared < 2 * BLOCK_TOKENS + 20, `shared ${shared}`);
  assert.ok(Math.abs(tokenCount(b) - 2000) < 20, `rendered ${tokenCount(b)} tokens for 2000`);
});

test('the sample keeps whole families: every later turn follows its parent, extends its prefix and finds it in the ideal cache', () => {
  const s = buildMooncakeTrace(ROWS, prefixFamilies(ROWS), ENGINES, { windowMs: 120_000, timeScale: 10, seconds: 12, load: 10, seed: 1, entrySeed: 2, entries: 3, contextTokens: 65536, gapMs: 1000 });
  assert.equal(s.trace.length, ROWS.length);
  const later = s.trace.filter((q) => q.after !== undefined);
  assert.equal(later.length, 3);
  for (const q of later) {
    const p = s.trace[q.after!];
    assert.ok(p.at <= q.at);
    assert.equal(p.conv, q.conv);
    assert.ok(commonPrefixTokens(p.prompt, q.prompt) >= 2 * BLOCK_TOKENS);
    assert.ok(q.idealCached >= 2 * BLOCK_TOKENS);
    assert.deepEqual(q.blocks!.slice(0, 2), p.blocks!.slice(0, 2));
  }
  // Time compressed ten-fold; answers are the trace's.
  assert.equal(s.trace.at(-1)!.at, 6300);
  assert.equal(s.trace[0].outputTokens, 100);
  // The single shot is not a conversation; the first request finds nothing cached.
  assert.equal(s.trace.find((q) => q.blocks![1] === 10)!.kind, 'single');
  assert.equal(s.trace[0].idealCached, 0);
  const bound = infiniteCacheBound(s.trace, ENGINES);
  assert.ok(bound.cached_share! > 0.3 && bound.cached_share! < 1);
});

test('a lower load samples fewer whole families, a subset of a higher load\'s', () => {
  const file = path.resolve('../shared/traces/mooncake/mooncake-conversation_trace.jsonl.gz');
  const rows = fs.existsSync(file) ? readMooncake(file) : undefined;
  if (!rows) return;
  const fam = prefixFamilies(rows);
  const shape = { windowMs: 900_000, timeScale: 10, seconds: 30, seed: 1, entrySeed: 2, entries: 3, contextTokens: 65536, gapMs: 1000 };
  const lo = buildMooncakeTrace(rows, fam, ENGINES, { ...shape, load: 0.5 });
  const hi = buildMooncakeTrace(rows, fam, ENGINES, { ...shape, load: 0.9 });
  assert.ok(Math.abs(lo.offeredLoad - 0.5) < 0.05, `offered ${lo.offeredLoad}`);
  assert.ok(hi.trace.length > lo.trace.length);
  const key = (q: { blocks?: readonly number[] }) => q.blocks!.join(',');
  const his = new Set(hi.trace.map(key));
  for (const q of lo.trace) assert.ok(his.has(key(q)));
  // Whole families: a conversation sampled at the lower load has all its turns there.
  const turnsOf = (t: typeof lo.trace) => t.reduce((m, q) => (q.conv === undefined ? m : m.set(q.conv, (m.get(q.conv) ?? 0) + 1)), new Map<number, number>());
  const hiTurns = turnsOf(hi.trace);
  for (const [conv, n] of turnsOf(lo.trace)) assert.equal(n, hiTurns.get(conv));
});

test('the prefix-sticky arm sends a next turn to the engine that ran its prefix while it has a free slot, and the system block alone makes no home', () => {
  const r = new PrefixStickyRouter([1, 1, 1], 1);
  const a = r.pick([0, 1, 2]);
  r.done(a);
  const other = r.pick([0, 7]);
  assert.notEqual(other, a, 'sharing only the system block is a new prefix: least loaded, round robin');
  r.done(other);
  assert.equal(r.pick([0, 1, 3]), a);
  // Its home is full now: the next turn goes elsewhere, and moves the home with it.
  const moved = r.pick([0, 1, 3, 4]);
  assert.notEqual(moved, a);
  r.done(a);
  r.done(moved);
  assert.equal(r.pick([0, 1, 3, 4, 5]), moved);
});

test('a window placed by hand replays from there: its requests only, their parents before it still defining the families', () => {
  // From 60 s of trace time: the last two requests; the first continues a request from before the window.
  const s = buildMooncakeTrace(ROWS, prefixFamilies(ROWS), ENGINES, { windowMs: 120_000, windowStartMs: 60_000, timeScale: 10, seconds: 12, load: 10, seed: 1, entrySeed: 2, entries: 3, contextTokens: 65536, gapMs: 1000 });
  assert.equal(s.windowStartMs, 60_000);
  assert.equal(s.trace.length, 2);
  assert.deepEqual(s.trace.map((q) => q.at), [0, 300]);
  // Its parent is not replayed, so it runs as the family's first turn here.
  assert.ok(s.trace.every((q) => q.after === undefined));
});
