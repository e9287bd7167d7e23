/**
 * The plan both translated APIs share (Messages, Responses): how an
 * executor whose engine speaks only chat completions serves a request of
 * another API. The request becomes a chat completion; the engine's stream is
 * translated event by event and its whole answer at once, both by the API's
 * own translator.
 */
import { ApiError } from '../../http/errors.ts';
import type { AnswerTranslator } from '../../http/relay.ts';
import type { ChatRequest } from '../../chat/index.ts';
import { orderTools, type Hygiene } from './tool-order.ts';

export type TranslatedPlan =
  | { kind: 'native' }
  | { kind: 'translate'; path: string; body: Buffer; translate: AnswerTranslator; omittedTools: string[] }
  | { kind: 'refuse'; error: ApiError };

/**
 * A translated request refused before it reaches the engine (its body too
 * large or not JSON, a field the translation cannot carry): the executor's
 * own 4xx, with the refusal's status, words and code.
 */
export function refusalError(r: { status: number; message: string; code: string }): ApiError {
  return new ApiError(r.status, r.message, 'invalid_request_error', r.code);
}

/** The plan of a refused translation (refusalError). */
export function refusePlan(r: { status: number; message: string; code: string }): TranslatedPlan {
  return { kind: 'refuse', error: refusalError(r) };
}

/** What an API's stream translator does with the engine's chat completion stream (its events as text). */
export interface StreamTranslator {
  start(): string;
  pushBytes(chunk: Buffer): string;
  end(): string;
  error(message: string): string;
}

/**
 * The translated plan for `chat` (already the engine's request, model set):
 * its tools put in the session's stable order (prompt-cache hygiene), then
 * sent to /v1/chat/completions, with the API's answer translators.
 */
export function chatPlan(
  chat: ChatRequest,
  o: {
    sessionKey?: string;
    hygiene?: Hygiene;
    omittedTools: string[];
    stream: StreamTranslator;
    keepAlive?: { everyMs: number; text: string };
    whole: AnswerTranslator['whole'];
    failure?: AnswerTranslator['failure'];
  },
): Extract<TranslatedPlan, { kind: 'translate' }> {
  orderTools(chat, o.sessionKey, o.hygiene);
  const s = o.stream;
  return {
    kind: 'translate',
    path: '/v1/chat/completions',
    body: Buffer.from(JSON.stringify(chat)),
    omittedTools: o.omittedTools,
    translate: {
      stream: {
        start: () => s.start(),
        push: (chunk) => s.pushBytes(chunk),
        end: () => s.end(),
        error: (message) => s.error(message),
        ...(o.keepAlive ? { keepAlive: o.keepAlive } : {}),
      },
      whole: o.whole,
      ...(o.failure ? { failure: o.failure } : {}),
    },
  };
}
