/**
 * POST /v1/messages on the executing node (SPEC sections 4 and 8): a target
 * whose descriptor lists `messages` gets the request as it is; any other chat
 * target gets it translated to a chat completion and its answer translated
 * back (src/messages/). The entry node never translates: only the executor
 * knows what its engine speaks. Errors of the engine's own come back in
 * Anthropic's shape; a stream pings while the engine is silent.
 *
 * POST /v1/messages/count_tokens is answered by the node the client called,
 * without a slot or the queue: `countTokens`.
 */
import { abortSignalOf, type Gone } from '../../http/gone.ts';
import { parseTranslatedBody } from '../../chat/index.ts';
import { anthropicErrorBody } from '../../http/errors.ts';
import { upstreamErrorText } from '../../http/relay.ts';
import { chatToMessage, countText, estimateTokens, messagesToChat, MessagesStreamTranslator, PING } from '../../messages/index.ts';
import type { Descriptor } from '../../workloads/workloads.ts';
import type { Hygiene } from './tool-order.ts';
import { chatPlan, refusalError, refusePlan, type TranslatedPlan } from './translated-plan.ts';
import type { RoutedRequest } from '../types.ts';

export const MESSAGES_PATH = '/v1/messages';
export const COUNT_TOKENS_PATH = '/v1/messages/count_tokens';

/** A Messages stream writes `ping` after this much silence from the engine (a long prefill). */
export const PING_EVERY_MS = 5_000;

export type MessagesPlan = TranslatedPlan;

/** The Messages body parsed for translation, or why it cannot be (too large, not JSON). */
function readBody(req: RoutedRequest): ReturnType<typeof parseTranslatedBody> {
  return parseTranslatedBody(req.body, 'Messages', 'send a shorter conversation');
}

/** The engine's error answer to a translated request, in Anthropic's shape with the engine's own words. */
function failure(status: number, body: Buffer | undefined): Buffer {
  const text = upstreamErrorText(body) ?? `the engine answered HTTP ${status}`;
  return Buffer.from(JSON.stringify(anthropicErrorBody(status, text)));
}

export function planMessages(req: RoutedRequest, descriptor: Descriptor, context: number, hygiene?: Hygiene): MessagesPlan {
  if (descriptor.workloads.includes('messages')) return { kind: 'native' };
  const parsed = readBody(req);
  if (!parsed.ok) return refusePlan(parsed.refusal);
  const t = messagesToChat(parsed.doc, { hygiene: hygiene?.on ?? true });
  if (!t.ok) return refusePlan(t.error);
  const chat = { ...t.chat, model: req.model };
  // Agent clients ask for more than a local context holds (Claude Code: 32000); the engine gets what fits.
  if (context > 0 && chat.max_tokens !== undefined && chat.max_tokens > context) chat.max_tokens = context;
  const meta = { ...t.meta, model: req.alias ?? t.meta.model };
  return chatPlan(chat, {
    sessionKey: req.sessionKey,
    hygiene,
    omittedTools: meta.omittedTools,
    stream: new MessagesStreamTranslator(meta),
    keepAlive: { everyMs: PING_EVERY_MS, text: PING },
    whole(body) {
      let doc: unknown;
      try {
        doc = JSON.parse(body.toString('utf8'));
      } catch {
        return { status: 502, body: Buffer.from(JSON.stringify(anthropicErrorBody(502, 'the engine answered the translated chat completion with something that is not JSON'))) };
      }
      const m = chatToMessage(doc, meta);
      if (!m.ok) return { status: 502, body: Buffer.from(JSON.stringify(anthropicErrorBody(502, m.message))) };
      return { status: 200, body: Buffer.from(JSON.stringify(m.message)) };
    },
    failure,
  });
}

/** A tokenizer of an engine serving the model on this node: the number of tokens of a text, or undefined. */
export type Tokenizer = (text: string, signal: AbortSignal) => Promise<number | undefined>;

/**
 * count_tokens: `{"input_tokens": N}` from the engine's tokenizer when this
 * node has one for the model, else the estimate. Never takes a slot.
 */
export async function countTokens(req: RoutedRequest, tokenizer: Tokenizer | undefined, signal: Gone): Promise<{ input_tokens: number }> {
  const parsed = readBody(req);
  if (!parsed.ok) throw refusalError(parsed.refusal);
  // count_tokens has no max_tokens; the translation does not need one.
  const t = messagesToChat(parsed.doc, { hygiene: false });
  if (!t.ok) throw refusalError(t.error);
  const text = countText(t.chat);
  const counted = tokenizer ? await tokenizer(text, abortSignalOf(signal)).catch(() => undefined) : undefined;
  return { input_tokens: counted ?? estimateTokens(text) };
}
