/**
 * The link an assistant's reply adds to a prompt's chain (SPEC section 7,
 * "Cache digest"; section 9, step 6): after a turn, an engine's slot holds
 * the prompt and the reply it generated, and a client's next turn is that
 * prompt, the reply as the client echoes it, then the new message. So the
 * executor records the reply's link with the prompt it cached, and the next
 * turn's chain meets it there: its cached tokens reach through the reply.
 *
 * The echo is read back the way segments.ts reads each dialect's body: a
 * chat message's content then its tool calls (arguments as sent), a
 * Responses message then its function calls (the same text), a Messages
 * turn's text then its tool_use blocks (the input object in canonical
 * JSON). Completions have no turns: nothing is added. Pure.
 */
import { toolInput, type ChatReply } from '../chat/index.ts';
import type { PromptDialect } from '../workloads/workloads.ts';
import { callText, canonicalJson, joinLines, renderSegment } from './canonical.ts';
import { linkHash } from './chain.ts';
import type { ChainLink, PrefixChain } from './held.ts';
import { tokensIn } from './tokens.ts';

/** The canonical text of the assistant turn a client of `dialect` echoes for `reply`; undefined for completions. */
export function replyText(reply: ChatReply, dialect: PromptDialect): string | undefined {
  if (dialect === 'completions') return undefined;
  const calls = reply.calls.map((c) => callText(c.name, dialect === 'messages' ? canonicalJson(toolInput(c.args)) : c.args));
  return joinLines([reply.text, ...calls]);
}

/**
 * The link the next turn's chain has right after `chain`'s last, when the
 * client echoes `reply`; its tokens are the chain's estimate (bytes ÷ 4, to
 * within one). undefined for an empty chain or completions.
 */
export function replyLink(chain: PrefixChain, reply: ChatReply, dialect: PromptDialect): ChainLink | undefined {
  const last = chain[chain.length - 1];
  const text = last && replyText(reply, dialect);
  if (text === undefined) return undefined;
  const segment = renderSegment({ role: 'assistant', text });
  return { hash: linkHash(last.hash, segment), tokens: last.tokens + tokensIn(segment.length) };
}
