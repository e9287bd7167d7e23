/**
 * What the entry needs of a stream that may be cut and continued (SPEC 13):
 * which requests watch what their client holds, what a forward's call
 * carries for it, and the request that continues a cut one.
 */
import { scanJsonObject } from '../../http/json-scan.ts';
import { estimateTokens } from '../../prompt/tokens.ts';
import { continuationBody, isContinuedDialect, spliceTranslator, Transcript } from '../../survive/index.ts';
import { GENERATION_WORKLOADS } from '../../workloads/workloads.ts';
import type { DispatchRequest, RoutedRequest } from '../types.ts';

/** A streamed generation in an API whose cut can be continued (SPEC 13): what the client holds is read as it goes. */
export function survivalOf(rr: RoutedRequest): RoutedRequest {
  const d = rr.endpoint.dialect;
  if (!rr.stream || !rr.scan || rr.endpoint.action !== 'infer' || !isContinuedDialect(d) || !GENERATION_WORKLOADS.includes(rr.workload)) return rr;
  return Object.assign(rr, { survive: { transcript: new Transcript(d), handBack: true } });
}

/** What a forward's call carries of its stream's survival (SPEC 13). */
export function survivalCall(rr: RoutedRequest): { tap?: (out: Buffer | string) => void; handBack?: boolean; splice?: ReturnType<typeof spliceTranslator> } {
  const s = rr.stream ? rr.survive : undefined;
  if (!s) return {};
  const t = s.transcript;
  return { ...(t ? { tap: (out: Buffer | string) => t.push(out) } : {}), ...(s.handBack ? { handBack: true } : {}), ...(s.splice ? { splice: spliceTranslator(s.splice) } : {}) };
}

/** The client's request with the answer it holds as the assistant's start, for another host; or why it cannot be continued. */
export function continuationRequest(rr: RoutedRequest, t: Transcript): { ok: true; req: DispatchRequest } | { ok: false; why: string } {
  const plan = continuationBody(rr.body, t);
  const scanned = plan.ok ? scanJsonObject(plan.body) : undefined;
  if (!plan.ok || !scanned?.ok) return { ok: false, why: plan.ok ? 'the continued request does not scan' : plan.why };
  const body = plan.body;
  const req: DispatchRequest = Object.assign({}, rr, {
    model: rr.alias ?? rr.model,
    // The pinned host is the one that failed: the stream goes on elsewhere.
    pin: undefined,
    body,
    scan: scanned.object,
    promptTokens: estimateTokens(body.length),
    // The continuation asks for usage itself (chat); the splice passes it on only when the client asked.
    clientWantsUsage: true,
    ...(rr.maxTokens !== undefined ? { maxTokens: Math.max(1, rr.maxTokens - t.tokens) } : {}),
  });
  return { ok: true, req };
}
