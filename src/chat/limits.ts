/**
 * How much a translation to chat takes: the request body's size, and bounds
 * inside it. Past one, the client gets a 413 or a 400 `input_too_large`
 * rather than a node that parses or walks an unbounded body on its event loop.
 * Also the checks every translated API (Responses, Messages) makes of a body
 * before translating it: not over TRANSLATE_MAX (413), valid JSON (400); the
 * refusal is plain data, which the caller puts in its API's error shape.
 */

/** A request body larger than this is not translated (it would be parsed whole on the event loop). */
export const TRANSLATE_MAX = 8 * 1024 * 1024;

/** Bounds inside a request body; past one, a 400 `input_too_large`. */
export interface TranslationLimits {
  /** Nesting depth of the whole request body (objects and arrays). */
  maxDepth: number;
  /** Items in `input` (Responses), turns in `messages` (Messages). */
  maxInputItems: number;
  /** Content parts in one message. */
  maxContentParts: number;
  /** Entries in `tools`. */
  maxTools: number;
}

export const DEFAULT_LIMITS: TranslationLimits = { maxDepth: 64, maxInputItems: 4096, maxContentParts: 1024, maxTools: 512 };

export type BodyRefusal = { status: 413; message: string; code: 'request_too_large' } | { status: 400; message: string; code: 'invalid_json' };

/**
 * The parsed body, or why it is not translated. `api` names the client's API
 * in the 413 ("Responses"), `advice` ends it ("send a shorter input").
 */
export function parseTranslatedBody(body: Buffer, api: string, advice: string): { ok: true; doc: unknown } | { ok: false; refusal: BodyRefusal } {
  if (body.length > TRANSLATE_MAX) {
    return { ok: false, refusal: { status: 413, message: `a ${api} API request to a chat-only engine is translated, and translation takes at most ${TRANSLATE_MAX} bytes; ${advice}`, code: 'request_too_large' } };
  }
  try {
    // Bounded: api.max_body and the scanner's depth check have already passed.
    return { ok: true, doc: JSON.parse(body.toString('utf8')) };
  } catch {
    return { ok: false, refusal: { status: 400, message: 'the request body is not valid JSON', code: 'invalid_json' } };
  }
}
