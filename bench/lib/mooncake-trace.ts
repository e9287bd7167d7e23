/**
 * The routing benchmark's real traces (issue 42): Mooncake's conversation
 * trace (an hour of Kimi's production chat) and its synthetic one, in
 * ../shared/traces/mooncake/ (see its README), replayed as chat requests.
 *
 * The trace has no session ids: a conversation is known only by its prefix.
 * A request's parent is the latest earlier request it shares the longest run
 * of block ids with, counted only past the blocks every request shares (the
 * conversation trace's first block, a system prompt, is in all of them); a
 * prefix family is a request with its parents, transitively. Sampling keeps
 * whole families so that a later turn meets the cache its earlier turns
 * left; sampling requests would cut almost every conversation.
 *
 * The replay takes the trace's busiest window, compressed in time
 * (`timeScale`, so a next turn about 120 s later in the trace comes about
 * 12 s later here), and adds families in a seeded order until the sample's
 * offered load reaches the asked share of the fleet's no-cache capacity.
 * The order is the same for every load, so a higher load's sample holds a
 * lower one's. A later turn leaves at its planned time, or `gapMs` after
 * its parent's answer ended when that is later (a client needs the answer).
 *
 * Each 512-token block id renders as one message of exactly 512 simulated
 * tokens (2,048 characters, prompt-cache.ts's 4 per token) drawn from a
 * generator seeded by the id, so equal ids give equal text and equal id
 * chains give equal prompt prefixes; the last (partial) block is cut to its
 * tokens. One message per block lets the prefix chain (one link per
 * message) see every shared block, as it would see a real chat's turns. The
 * first block is the system message. A next turn therefore shares its
 * parent's whole blocks but not its partial last block nor its answer: the
 * reuse the trace's ids record, which is what its published cache-hit
 * figures count.
 */
import fs from 'node:fs';
import zlib from 'node:zlib';
import { seeded, shuffle } from '../../test/helpers/random.ts';
import { renderPrompt, reusableTokens, tokenCount } from '../../src/engines/prompt-cache.ts';
import { decodeMs, prefillMs, words, type EngineSpec, type Message, type TraceRequest } from './chat-trace.ts';

export interface MooncakeRow {
  /** ms from the trace's first request */
  timestamp: number;
  input_length: number;
  output_length: number;
  hash_ids: number[];
}

export const BLOCK_TOKENS = 512;
const CHARS_PER_BLOCK = BLOCK_TOKENS * 4;

export function readMooncake(file: string): MooncakeRow[] {
  const text = zlib.gunzipSync(fs.readFileSync(file)).toString('utf8');
  return text
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as MooncakeRow);
}

export interface Families {
  /** family number of each row */
  family: number[];
  /** the row each row continues (-1: none) */
  parent: number[];
  /** blocks every row starts with (the conversation trace's system prompt: 1) */
  common: number;
}

/** Blocks at the start of every row (ids are chained, so equal ids at a position mean equal prefixes). */
function commonBlocks(rows: MooncakeRow[]): number {
  if (!rows.length) return 0;
  let n = rows[0].hash_ids.length;
  for (const r of rows) {
    let k = 0;
    while (k < n && k < r.hash_ids.length && r.hash_ids[k] === rows[0].hash_ids[k]) k++;
    n = k;
  }
  return n;
}

/**
 * Parents and prefix families. Ids are chained (an equal id means the whole
 * prefix up to it is equal), so the latest row holding a row's deepest
 * known id is one that shares its longest prefix.
 */
export function prefixFamilies(rows: MooncakeRow[]): Families {
  const common = commonBlocks(rows);
  const holder = new Map<number, number>();
  const family: number[] = [];
  const parent: number[] = [];
  let families = 0;
  rows.forEach((r, i) => {
    let p = -1;
    for (let k = r.hash_ids.length - 1; k >= common; k--) {
      const h = holder.get(r.hash_ids[k]);
      if (h !== undefined) {
        p = h;
        break;
      }
    }
    parent.push(p);
    family.push(p >= 0 ? family[p] : families++);
    for (const id of r.hash_ids) holder.set(id, i);
  });
  return { family, parent, common };
}

/** Start (ms) of the `ms`-long window holding the most requests (earliest on ties). */
export function busiestWindow(rows: MooncakeRow[], ms: number): number {
  const ts = rows.map((r) => r.timestamp).sort((a, b) => a - b);
  let best = 0;
  let bestStart = ts[0] ?? 0;
  let hi = 0;
  for (let lo = 0; lo < ts.length; lo++) {
    while (hi < ts.length && ts[hi] < ts[lo] + ms) hi++;
    if (hi - lo > best) {
      best = hi - lo;
      bestStart = ts[lo];
    }
  }
  return bestStart;
}

// Rendering is the costly part of a sample (a block is drawn word by word): a run renders each id once.
const blockCache = new Map<number, string>();

/** The text of block `id`: 512 simulated tokens, the same for the same id. */
export function blockText(id: number): string {
  let t = blockCache.get(id);
  if (t === undefined) {
    t = words(seeded((id * 2654435761) ^ 0x5bd1e995), BLOCK_TOKENS).padEnd(CHARS_PER_BLOCK, 'x');
    blockCache.set(id, t);
  }
  return t;
}

/** A row's messages: the first block as the system message, every other block a user message, the last cut to its tokens. */
export function mooncakeMessages(ids: readonly number[], inputTokens: number): Message[] {
  const lastTokens = Math.max(1, Math.min(BLOCK_TOKENS, inputTokens - (ids.length - 1) * BLOCK_TOKENS));
  return ids.map((id, k) => {
    const text = blockText(id);
    return { role: k === 0 ? 'system' : 'user', content: k === ids.length - 1 ? text.slice(0, lastTokens * 4) : text };
  });
}

export interface MooncakeShape {
  /** the trace's window replayed, ms of trace time (the busiest one) */
  windowMs: number;
  /** where the window starts, ms of trace time; absent: the busiest window */
  windowStartMs?: number;
  /** trace time ÷ replay time */
  timeScale: number;
  /** replay only the window's first `seconds` (replay time) */
  seconds: number;
  /** share of the fleet's no-cache capacity the sample offers */
  load: number;
  /** orders the families (the same order for every load) */
  seed: number;
  /** draws each request's entry node */
  entrySeed: number;
  entries: number;
  /** prompts past context − answer − 1,024 keep their first whole blocks that fit */
  contextTokens: number;
  /** a next turn leaves at least this long after its parent's answer ended */
  gapMs: number;
}

export interface MooncakeSample {
  trace: TraceRequest[];
  /** the window's start in trace ms, its requests and families */
  windowStartMs: number;
  windowRequests: number;
  windowFamilies: number;
  families: number;
  /** share of the window's families sampled */
  familyShare: number;
  /** the sample's offered load (its rate ÷ the no-cache capacity for its own requests) */
  offeredLoad: number;
  capacityReqPerS: number;
  capped: number;
  commonBlocks: number;
}

/** Slot-busy time on an engine of a request with `tokens` of prompt and `out` of answer, no cache. */
const busy = (e: EngineSpec, tokens: number, out: number) => prefillMs(e, tokens, 0) + decodeMs(e, out);

/**
 * The replayed sample for one load. `rows` and `fam` are the whole trace's,
 * so a family's parents before the window still define it (its first turn
 * in the window then runs cold, as it would on a fleet just started).
 */
export function buildMooncakeTrace(rows: MooncakeRow[], fam: Families, engines: EngineSpec[], shape: MooncakeShape): MooncakeSample {
  const start = shape.windowStartMs ?? busiestWindow(rows, shape.windowMs);
  const spanMs = Math.min(shape.windowMs, shape.seconds * 1000 * shape.timeScale);
  const inWindow = rows.flatMap((r, i) => (r.timestamp >= start && r.timestamp < start + spanMs ? [i] : []));
  const byFamily = new Map<number, number[]>();
  for (const i of inWindow) {
    const xs = byFamily.get(fam.family[i]);
    if (xs) xs.push(i);
    else byFamily.set(fam.family[i], [i]);
  }
  const order = shuffle([...byFamily.keys()].sort((a, b) => a - b), seeded(shape.seed * 7727 + 3));
  const outOf = (i: number) => Math.max(1, rows[i].output_length);
  const tokensOf = (i: number) => Math.min(rows[i].input_length, shape.contextTokens - outOf(i) - 1024);
  // Families join until the sample's rate reaches `load` of the capacity for its own mix (Σ slots ÷ mean busy time):
  // its load then holds whatever prompts and answers the families drawn happen to have.
  const sums = engines.map(() => 0);
  const chosen: number[] = [];
  const seconds = spanMs / shape.timeScale / 1000;
  const capacityOf = () => engines.reduce((a, e, k) => a + e.slots / (sums[k] / chosen.length / 1000), 0);
  let familiesTaken = 0;
  for (const f of order) {
    if (chosen.length > 0 && chosen.length / seconds >= shape.load * capacityOf()) break;
    for (const i of byFamily.get(f)!) {
      chosen.push(i);
      engines.forEach((e, k) => (sums[k] += busy(e, tokensOf(i), outOf(i))));
    }
    familiesTaken++;
  }
  chosen.sort((a, b) => rows[a].timestamp - rows[b].timestamp || a - b);

  const rEntry = seeded(shape.entrySeed);
  const pos = new Map<number, number>();
  const holder = new Map<number, number>();
  const familySize = new Map<number, number>();
  for (const i of chosen) familySize.set(fam.family[i], (familySize.get(fam.family[i]) ?? 0) + 1);
  const turns = new Map<number, number>();
  const out: TraceRequest[] = [];
  let capped = 0;
  const commonTokens = fam.common * BLOCK_TOKENS;
  for (const i of chosen) {
    const r = rows[i];
    const tokens = tokensOf(i);
    let ids = r.hash_ids;
    if (tokens < r.input_length) {
      capped++;
      ids = ids.slice(0, Math.max(1, Math.floor(tokens / BLOCK_TOKENS)));
    }
    const messages = mooncakeMessages(ids, ids === r.hash_ids ? r.input_length : ids.length * BLOCK_TOKENS);
    const prompt = renderPrompt(true, { messages })!;
    // The ideal (infinite) cache: the longest prefix any earlier request of the sample rendered.
    let ideal = 0;
    for (let k = ids.length - 1; k >= 0; k--) {
      const h = holder.get(ids[k]);
      if (h !== undefined) {
        ideal = reusableTokens(out[h].prompt, prompt);
        break;
      }
    }
    const p = fam.parent[i];
    const after = p >= 0 ? pos.get(p) : undefined;
    const f = fam.family[i];
    const turn = turns.get(f) ?? 0;
    turns.set(f, turn + 1);
    const conv = (familySize.get(f) ?? 0) > 1;
    const shared = after !== undefined ? reusableTokens(out[after].prompt, prompt) : 0;
    out.push({
      i: out.length,
      kind: conv ? 'conv' : 'single',
      at: (r.timestamp - start) / shape.timeScale,
      entry: Math.floor(rEntry() * shape.entries),
      ...(conv ? { conv: f } : {}),
      turn,
      ...(after !== undefined ? { after, gapMs: shape.gapMs } : {}),
      messages,
      prompt,
      promptTokens: tokenCount(prompt),
      idealCached: ideal,
      outputTokens: outOf(i),
      blocks: ids,
      // Found its cache: at least half of what its parent left past the system prompt every slot holds anyway.
      ...(after !== undefined ? { warmTokens: Math.min(shared, commonTokens) + 0.5 * Math.max(0, shared - commonTokens) } : {}),
    });
    pos.set(i, out.length - 1);
    for (const id of ids) holder.set(id, out.length - 1);
  }
  return {
    trace: out,
    windowStartMs: start,
    windowRequests: inWindow.length,
    windowFamilies: byFamily.size,
    families: familiesTaken,
    familyShare: byFamily.size ? familiesTaken / byFamily.size : 0,
    offeredLoad: chosen.length ? chosen.length / seconds / capacityOf() : 0,
    capacityReqPerS: chosen.length ? capacityOf() : 0,
    capped,
    commonBlocks: fam.common,
  };
}

/**
 * The infinite-cache bound: every request reuses the longest prefix any
 * earlier request rendered (idealCached) and gets a slot at once on the
 * engine where that is fastest. No router reaches it: slots are finite, and
 * busy.
 */
export function infiniteCacheBound(trace: TraceRequest[], engines: EngineSpec[]) {
  const ttfts = trace.map((q) => Math.min(...engines.map((e) => prefillMs(e, q.promptTokens, q.idealCached)))).sort((a, b) => a - b);
  const prompt = trace.reduce((a, q) => a + q.promptTokens, 0);
  const cached = trace.reduce((a, q) => a + q.idealCached, 0);
  const pct = (p: number) => ttfts[Math.min(ttfts.length - 1, Math.ceil((p / 100) * ttfts.length) - 1)];
  const r1 = (x: number) => Math.round(x * 10) / 10;
  return {
    arm: 'infinite_cache_bound',
    requests: trace.length,
    ttft_mean_ms: r1(ttfts.reduce((a, b) => a + b, 0) / (ttfts.length || 1)),
    ttft_p50_ms: r1(pct(50)),
    ttft_p95_ms: r1(pct(95)),
    cached_share: prompt ? Math.round((cached / prompt) * 1000) / 1000 : null,
    stayed_on_host_share: 1,
    wait_mean_ms: 0,
  };
}

/** How the benchmark replays a Mooncake trace (issue 42): the busiest 15 minutes, ten times faster, a second of think time. */
export const MOONCAKE_REPLAY = { windowMs: 15 * 60_000, timeScale: 10, gapMs: 1000 } as const;

export const MOONCAKE_FILES = {
  mooncake: 'mooncake-conversation_trace.jsonl.gz',
  'mooncake-synthetic': 'mooncake-synthetic_trace.jsonl.gz',
} as const;

/** One Mooncake trace read once, and a sampler of it per load: (load, seconds, family-order seed, entry seed) → sample. */
export function mooncakeReplay(file: string, engines: EngineSpec[], contextTokens: number, entries = 3, windowStartMs?: number) {
  const rows = readMooncake(file);
  const fam = prefixFamilies(rows);
  const at = windowStartMs !== undefined ? { windowStartMs } : {};
  return (load: number, seconds: number, seed: number, entrySeed: number) =>
    buildMooncakeTrace(rows, fam, engines, { ...MOONCAKE_REPLAY, ...at, seconds, load, seed, entrySeed, entries, contextTokens });
}

/** What one load's sample holds, for the results. */
export function mooncakeSampleInfo(s: MooncakeSample) {
  const tokens = s.trace.map((q) => q.promptTokens).sort((a, b) => a - b);
  const at = (p: number) => tokens[Math.min(tokens.length - 1, Math.floor(p * tokens.length))] ?? null;
  return {
    window_start_s: s.windowStartMs / 1000,
    window_requests: s.windowRequests,
    window_families: s.windowFamilies,
    families: s.families,
    family_share: Math.round(s.familyShare * 10000) / 10000,
    requests: s.trace.length,
    later_turns: s.trace.filter((q) => q.after !== undefined).length,
    offered_load: Math.round(s.offeredLoad * 1000) / 1000,
    capacity_req_per_s: Math.round(s.capacityReqPerS * 100) / 100,
    prompt_tokens_p50: at(0.5),
    prompt_tokens_p90: at(0.9),
    output_tokens_mean: Math.round(s.trace.reduce((a, q) => a + (q.outputTokens ?? 0), 0) / (s.trace.length || 1)),
    capped_to_context: s.capped,
  };
}

/** How the trace was replayed, for the results' settings. */
export function mooncakeSettings(s: MooncakeSample) {
  return {
    replay: MOONCAKE_REPLAY,
    families: 'a request continues the latest earlier one sharing its longest block-id prefix past the blocks all requests share; families are kept whole, added in a seeded order until the load is reached',
    rendering: 'one message per 512-token block id (2,048 characters of words seeded by the id: equal ids, equal text), the first as the system message, the last cut to its tokens',
    answers: "max_tokens = the trace's output_length (the sims may run to 2,048)",
    session_headers: 'none (the trace has none)',
    sticky_arm: `prefix-sticky: the engine that last ran the longest known block-id prefix (past the ${s.commonBlocks} shared block(s)) while it has a free slot, else the least loaded`,
    bound: 'infinite cache: every request reuses the longest prefix any earlier request of the sample rendered, at once on its fastest engine',
    common_blocks: s.commonBlocks,
    sample_80: mooncakeSampleInfo(s),
  };
}
