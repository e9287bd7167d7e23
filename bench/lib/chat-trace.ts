/**
 * The routing benchmark's request trace (issue 11): a seeded mix of
 * multi-turn conversations that share system prompts (half of them send
 * X-Session-Id, half do not), single shots and long prompts, and the
 * engines' clocks to price it.
 *
 * Conversation starts, single shots and long prompts arrive as one Poisson
 * process. Within a conversation each next turn is planned a think time
 * after the previous one; it leaves at its planned time, or, when the
 * previous answer has not ended by then, 50 ms after it ends (a client needs
 * the answer to send the next turn). The assistant messages a conversation
 * sends back are the sim engine's answers, which are deterministic, so the
 * same trace can be built before any request runs.
 */
import { seeded } from '../../test/helpers/random.ts';
import { renderPrompt, reusableTokens, tokenCount } from '../../src/engines/prompt-cache.ts';

export interface EngineSpec {
  name: string;
  slots: number;
  /** sim.ttft_ms */
  ttftMs: number;
  /** sim.prefill_ms_per_1k */
  prefillPer1k: number;
  /** sim.tokens_per_s */
  tokensPerS: number;
  /** sim.output_tokens (and every request's max_tokens) */
  outputTokens: number;
}

/** Time to the first token of a request that gets a slot at once and reuses `cached` of its `tokens`. */
export function prefillMs(e: EngineSpec, tokens: number, cached: number): number {
  return e.ttftMs + (e.prefillPer1k * Math.max(0, tokens - cached)) / 1000;
}

/** Time a slot stays busy after the first token (`outputTokens`: the request's own answer length, when the trace has one). */
export function decodeMs(e: EngineSpec, outputTokens = e.outputTokens): number {
  return ((outputTokens - 1) * 1000) / e.tokensPerS;
}

export type Kind = 'conv' | 'single' | 'long';
export type Message = { role: string; content: string };

export interface TraceRequest {
  /** Index in the trace (send order of the plan). */
  i: number;
  kind: Kind;
  /** Planned send time, ms from the start of the run. */
  at: number;
  /** The viiwork node it enters (0..entries-1). */
  entry: number;
  /** Conversation number, and the turn (0-based) within it. */
  conv?: number;
  turn: number;
  /** The trace index of the previous turn, which must end before this one leaves. */
  after?: number;
  /** X-Session-Id, for the conversations that send one. */
  session?: string;
  messages: Message[];
  /** Rendered prompt as the sim sees it (for the oracle's cache model). */
  prompt: string;
  promptTokens: number;
  /** Tokens of the prompt a slot that served this conversation's previous turn (or holds its system prompt) could reuse: the ideal cache. */
  idealCached: number;
  /** A next turn leaves at least this long after the previous answer ended (default: the benchmark's 50 ms). */
  gapMs?: number;
  /** Its answer's tokens (max_tokens), when the trace says (Mooncake's output_length); else the engines' fixed count. */
  outputTokens?: number;
  /** Mooncake's 512-token block ids of the prompt (the prefix-sticky arm routes by them). */
  blocks?: readonly number[];
  /** A later turn found its cache when the engine reused at least this many tokens (default: half its prompt). */
  warmTokens?: number;
}

export interface TraceShape {
  /** Starts per second (conversations + single shots + long prompts). */
  startsPerS: number;
  /** Starts are drawn in [0, seconds); turns of a conversation planned more than `tailS` past that are dropped. */
  seconds: number;
  tailS: number;
  entries: number;
  answer: string;
}

/** The mix: shares of starts, sizes in tokens, think times. */
export const MIX = {
  conversationShare: 0.3,
  longShare: 0.08,
  /** the rest are single shots */
  sessionHeaderShare: 0.5,
  systemPrompts: 6,
  systemTokens: [1000, 2500] as const,
  turns: [3, 12] as const,
  firstUserTokens: [50, 250] as const,
  laterUserTokens: [20, 150] as const,
  /** single shots: this share with one of the shared system prompts */
  singleWithSystem: 0.6,
  singleUserTokens: [50, 300] as const,
  longTokens: [4000, 8000] as const,
  /** gap between a turn's planned time and the next: an allowance for the answer + a think time (at least thinkMinMs, exponential with mean thinkMeanMs): an agent's loop or a quick user */
  thinkMinMs: 100,
  thinkMeanMs: 500,
  answerAllowanceMs: 300,
};

const SYLLABLES = ['ka', 'lo', 'mi', 'ne', 'ru', 'sa', 'ti', 'vo', 'be', 'da', 'fi', 'go', 'hu', 'ja', 'pe', 'qu', 'ri', 'so', 'tu', 'xe', 'yo', 'ze'];

export function words(r: () => number, tokens: number): string {
  const want = tokens * 4;
  const out: string[] = [];
  let len = 0;
  while (len < want) {
    const n = 1 + Math.floor(r() * 3);
    let w = '';
    for (let k = 0; k < n; k++) w += SYLLABLES[Math.floor(r() * SYLLABLES.length)];
    out.push(w);
    len += w.length + 1;
  }
  return out.join(' ').slice(0, want);
}

export const between = (r: () => number, [lo, hi]: readonly [number, number]) => lo + Math.floor(r() * (hi - lo + 1));

/** The shared system prompts: the same for every trace of one benchmark run (seeded by `seed`). */
export function systemPrompts(seed: number): string[] {
  const r = seeded(seed * 7919 + 17);
  return Array.from({ length: MIX.systemPrompts }, (_, k) => `You are assistant ${k} of the benchmark. ${words(r, between(r, MIX.systemTokens))}`);
}

export function withPrompt(x: Omit<TraceRequest, 'i' | 'prompt' | 'promptTokens' | 'idealCached'>, reusable: string): Omit<TraceRequest, 'i'> {
  const prompt = renderPrompt(true, { messages: x.messages })!;
  return { ...x, prompt, promptTokens: tokenCount(prompt), idealCached: reusable ? reusableTokens(reusable, prompt) : 0 };
}

/**
 * One trace: every request with its planned time, sorted by it. `seed`
 * picks the arrivals and contents; `systems` are the shared system prompts.
 */
export function buildTrace(shape: TraceShape, seed: number, systems: string[]): TraceRequest[] {
  const r = seeded(seed);
  const out: Omit<TraceRequest, 'i'>[] = [];
  let t = 0;
  let conv = 0;
  const lastAt = (shape.seconds + shape.tailS) * 1000;
  for (;;) {
    t += (-Math.log(1 - r()) / shape.startsPerS) * 1000;
    if (t >= shape.seconds * 1000) break;
    const u = r();
    const entry = () => Math.floor(r() * shape.entries);
    if (u < MIX.conversationShare) {
      const id = conv++;
      const system = systems[Math.floor(r() * systems.length)];
      const session = r() < MIX.sessionHeaderShare ? `conv-${seed}-${id}-${Math.floor(r() * 1e9).toString(36)}` : undefined;
      const turns = between(r, MIX.turns);
      const messages: Message[] = [{ role: 'system', content: system }];
      let at = t;
      let held = renderPrompt(true, { messages: [{ role: 'system', content: system }] })!.slice(0, -'<|assistant|>\n'.length);
      let prev: number | undefined;
      for (let k = 0; k < turns && at < lastAt; k++) {
        messages.push({ role: 'user', content: `Conversation ${id}, turn ${k + 1}. ${words(r, between(r, k === 0 ? MIX.firstUserTokens : MIX.laterUserTokens))}` });
        const req = withPrompt({ kind: 'conv', at, entry: entry(), conv: id, turn: k, session, messages: [...messages], after: prev }, held);
        out.push(req);
        prev = out.length - 1;
        held = req.prompt + shape.answer;
        messages.push({ role: 'assistant', content: shape.answer });
        at += MIX.answerAllowanceMs + MIX.thinkMinMs - Math.log(1 - r()) * (MIX.thinkMeanMs - MIX.thinkMinMs);
      }
    } else if (u < MIX.conversationShare + MIX.longShare) {
      const doc = words(r, between(r, MIX.longTokens));
      out.push(withPrompt({ kind: 'long', at: t, entry: entry(), turn: 0, messages: [{ role: 'user', content: `Summarise this document: ${doc}` }] }, ''));
    } else {
      const sys = r() < MIX.singleWithSystem ? systems[Math.floor(r() * systems.length)] : undefined;
      const messages: Message[] = sys ? [{ role: 'system', content: sys }] : [];
      messages.push({ role: 'user', content: `A single question. ${words(r, between(r, MIX.singleUserTokens))}` });
      const held = sys ? renderPrompt(true, { messages: [{ role: 'system', content: sys }] })!.slice(0, -'<|assistant|>\n'.length) : '';
      out.push(withPrompt({ kind: 'single', at: t, entry: entry(), turn: 0, messages }, held));
    }
  }
  // Sort by planned time; `after` indices are remapped to the sorted order.
  const order = out.map((x, k) => ({ x, k })).sort((a, b) => a.x.at - b.x.at || a.k - b.k);
  const pos = new Map(order.map((o, i) => [o.k, i]));
  return order.map((o, i) => ({ ...o.x, i, after: o.x.after === undefined ? undefined : pos.get(o.x.after) }));
}

/**
 * Capacity of the fleet for this mix, in requests per second: Σ slots ÷ mean
 * time a slot is busy per request. `none`: every request prefills its whole
 * prompt (the engines' raw capacity; what the benchmark's loads are shares
 * of, so a router that keeps caches warm runs the same load at a lower
 * utilisation). `ideal`: every request reuses its ideal cache (a
 * conversation's earlier turns, a shared system prompt), out of reach for
 * any router since a slot holds one text at a time.
 */
export function capacity(engines: EngineSpec[], sample: readonly Pick<TraceRequest, 'promptTokens' | 'idealCached' | 'outputTokens'>[], cache: 'ideal' | 'none' = 'ideal'): { reqPerS: number; meanBusyMs: Record<string, number> } {
  const meanBusyMs: Record<string, number> = {};
  let total = 0;
  for (const e of engines) {
    const busy = sample.reduce((a, q) => a + prefillMs(e, q.promptTokens, cache === 'ideal' ? q.idealCached : 0) + decodeMs(e, q.outputTokens), 0) / sample.length;
    meanBusyMs[e.name] = Math.round(busy);
    total += e.slots / (busy / 1000);
  }
  return { reqPerS: total, meanBusyMs };
}

/** Requests per start of the mix, measured on a sample trace. */
export function requestsPerStart(sample: TraceRequest[]): number {
  const starts = sample.filter((q) => q.turn === 0).length;
  return sample.length / starts;
}
