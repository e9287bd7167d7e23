/**
 * The checks every translated API (Responses, Messages) makes of a request
 * body before translating it: not over TRANSLATE_MAX (413), valid JSON (400).
 * The refusal is plain data; the caller puts it in its API's error shape.
 */
import { TRANSLATE_MAX } from './limits.ts';

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
