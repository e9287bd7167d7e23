/**
 * POST /v1/responses on the executing node (SPEC section 8): a target whose
 * descriptor lists `responses` gets the request as it is; any other chat
 * target gets it translated to a chat completion, and its answer translated
 * back (src/responses/ does the translation). The entry node never
 * translates: only the executor knows what its engine speaks.
 */
import { parseTranslatedBody } from '../../chat/index.ts';
import { ApiError } from '../../http/errors.ts';
import { chatToResponse, ResponsesStreamTranslator, responsesToChat } from '../../responses/index.ts';
import type { Descriptor } from '../../workloads/workloads.ts';
import type { RoutedRequest } from '../types.ts';
import type { Hygiene } from './tool-order.ts';
import { chatPlan, refusePlan, type TranslatedPlan } from './translated-plan.ts';

export const RESPONSES_PATH = '/v1/responses';

export type ResponsesPlan = TranslatedPlan;

export function planResponses(req: RoutedRequest, descriptor: Descriptor, hygiene?: Hygiene): ResponsesPlan {
  if (descriptor.workloads.includes('responses')) return { kind: 'native' };
  const p = parseTranslatedBody(req.body, 'Responses', 'send a shorter input or use /v1/chat/completions');
  if (!p.ok) return refusePlan(p.refusal);
  const t = responsesToChat(p.doc);
  if (!t.ok) return refusePlan(t.error);
  const chat = { ...t.chat, model: req.model };
  const meta = { ...t.meta, model: req.alias ?? t.meta.model };
  return chatPlan(chat, {
    sessionKey: req.sessionKey,
    hygiene,
    omittedTools: meta.omittedTools,
    stream: new ResponsesStreamTranslator(meta),
    whole(body) {
      let parsed: unknown;
      try {
        parsed = JSON.parse(body.toString('utf8'));
      } catch {
        const e = new ApiError(502, 'the engine answered the translated chat completion with something that is not JSON', 'server_error', 'engine_failed');
        return { status: 502, body: Buffer.from(JSON.stringify(e.body())) };
      }
      return { status: 200, body: Buffer.from(JSON.stringify(chatToResponse(parsed, meta, { completedAt: Math.floor(Date.now() / 1000) }))) };
    },
  });
}
