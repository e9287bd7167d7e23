/**
 * The routing benchmark's long-agent trace (issue 25): coding-agent
 * sessions, the traffic this product exists for. Two shared system+tools
 * prompts of about 8k tokens; sessions of 6–20 turns, each turn adding a
 * tool result and the agent's next step (600–1,400 tokens) so the prompt
 * grows to about 27k; 1 s of think time after each answer; half the
 * sessions without a session header; every turn entering a random node;
 * and short single shots (20% of requests, 100–800 tokens, no shared
 * prompt), which take slots and evict whatever they hold.
 *
 * Our own generator and seeds (the same words as chat-trace.ts). A turn's
 * planned time is the previous turn's plus an allowance for its answer and
 * the think time; it leaves once the previous answer has ended plus the
 * think time (`gapMs`), whichever is later.
 */
import { seeded } from '../../test/helpers/random.ts';
import { renderPrompt } from '../../src/engines/prompt-cache.ts';
import { between, words, withPrompt, type Message, type TraceRequest, type TraceShape } from './chat-trace.ts';

export const AGENT_MIX = {
  /** of starts: with 13 turns a session on average, single shots are then 20% of requests */
  singleShare: 0.765,
  sessionHeaderShare: 0.5,
  systemPrompts: 2,
  systemTokens: [7500, 8500] as const,
  turns: [6, 20] as const,
  turnTokens: [600, 1400] as const,
  singleTokens: [100, 800] as const,
  thinkMs: 1000,
  /** planning allowance for an answer of a long prompt */
  answerAllowanceMs: 1500,
};

/** The agents' shared system+tools prompts (seeded). */
export function agentSystemPrompts(seed: number): string[] {
  const r = seeded(seed * 104729 + 7);
  return Array.from({ length: AGENT_MIX.systemPrompts }, (_, k) => `You are coding agent ${k}. Tools: read_file, edit_file, run_tests, grep. ${words(r, between(r, AGENT_MIX.systemTokens))}`);
}

/**
 * `swapHeaders`: the sessions that would carry a session header go without one, and the others carry one (the same
 * random draws, so the same conversations, prompts and times): a run of each pairs every conversation with itself,
 * with and without the header, for the header-less ratio (docs/benchmarks-history.md, session 18).
 */
export function buildAgentTrace(shape: TraceShape, seed: number, systems: string[], swapHeaders = false): TraceRequest[] {
  const r = seeded(seed);
  const out: Omit<TraceRequest, 'i'>[] = [];
  let t = 0;
  let conv = 0;
  const lastAt = (shape.seconds + shape.tailS) * 1000;
  for (;;) {
    t += (-Math.log(1 - r()) / shape.startsPerS) * 1000;
    if (t >= shape.seconds * 1000) break;
    const entry = () => Math.floor(r() * shape.entries);
    if (r() < AGENT_MIX.singleShare) {
      out.push(withPrompt({ kind: 'single', at: t, entry: entry(), turn: 0, messages: [{ role: 'user', content: `A quick question. ${words(r, between(r, AGENT_MIX.singleTokens))}` }] }, ''));
      continue;
    }
    const id = conv++;
    const system = systems[Math.floor(r() * systems.length)];
    const drawn = r() < AGENT_MIX.sessionHeaderShare ? `agent-${seed}-${id}-${Math.floor(r() * 1e9).toString(36)}` : undefined;
    const session = !swapHeaders ? drawn : drawn === undefined ? `agent-${seed}-${id}-swapped` : undefined;
    const turns = between(r, AGENT_MIX.turns);
    const messages: Message[] = [{ role: 'system', content: system }];
    let held = renderPrompt(true, { messages: [{ role: 'system', content: system }] })!.slice(0, -'<|assistant|>\n'.length);
    let at = t;
    let prev: number | undefined;
    for (let k = 0; k < turns && at < lastAt; k++) {
      const content = k === 0 ? `Task ${id}: ${words(r, between(r, AGENT_MIX.turnTokens))}` : `Tool result for step ${k} of task ${id}: ${words(r, between(r, AGENT_MIX.turnTokens))}`;
      messages.push({ role: 'user', content });
      const req = withPrompt({ kind: 'conv', at, entry: entry(), conv: id, turn: k, session, messages: [...messages], after: prev, gapMs: AGENT_MIX.thinkMs }, held);
      out.push(req);
      prev = out.length - 1;
      held = req.prompt + shape.answer;
      messages.push({ role: 'assistant', content: shape.answer });
      at += AGENT_MIX.answerAllowanceMs + AGENT_MIX.thinkMs;
    }
  }
  const order = out.map((x, k) => ({ x, k })).sort((a, b) => a.x.at - b.x.at || a.k - b.k);
  const pos = new Map(order.map((o, i) => [o.k, i]));
  return order.map((o, i) => ({ ...o.x, i, after: o.x.after === undefined ? undefined : pos.get(o.x.after) }));
}
