/**
 * What one request leaves behind (SPEC section 10): the decision feed's
 * entry and the request metrics, filled in as the request goes (a `Trace`)
 * and written once when it ends (`recordRequest`); and the response headers
 * that say where it ran.
 */
import { RES_NODE, RES_ORIGIN, RES_QUEUED_MS, RES_ROUTE } from '../http/viiwork-headers.ts';
import { genAiErrorType, genAiOperation } from '../metrics/gen-ai.ts';
import type { Candidate, RouteReason } from '../route/types.ts';
import type { EntrySpan } from '../telemetry/tracing.ts';
import type { DispatchPorts } from './ports.ts';
import type { Routed } from './types.ts';
import type { MoveResult } from '../survive/move-plan.ts';

/** What the decision feed and metrics learn of one request, filled in as it goes. */
export interface Trace {
  executor: string | null;
  route: RouteReason | 'forwarded' | 'not-routed';
  queuedMs: number;
  firstContentAt?: number;
  startedAt: number;
  outcome: string;
  /** The model is one some member serves (so it may be a metric label). */
  known: boolean;
  /** Prompt tokens the entry's pricing (or, run here unpriced, this executor's cache model) expected the host to hold. */
  predictedCached?: number;
  /** The engine's own count of prompt tokens served from its cache. */
  cachedTokens?: number;
  /** The engine's prompt tokens (this node's own executions). */
  promptTokens?: number;
  /** This node's executions: the slot its choice took, and what that evicted (SPEC 9.6, "Slot choice"). */
  slot?: number;
  evicted?: { tokens: number; idleMs: number };
  /** Run here on an engine with a RAM prompt cache: of the predicted cached tokens, those its slot choice restores from RAM. */
  restored?: number;
  /** The engine's completion tokens (this node's own executions). */
  completionTokens?: number;
  /** A slot cache taken from a member for this run (SPEC 13, "Moving a cache"), moved or not. */
  move?: MoveResult;
  /** A stream continued after a cut (SPEC 13): the host it was cut from and the answer's tokens carried over. */
  continued?: { from: string; tokens: number };
  /** This node's number for the request: with the entry's name, its timeline's id (dispatch/timeline.ts). */
  readonly id: number;
  /** A forward's: its timeline's id at the entry (the `req` claim), which this executor's part is kept under. */
  origin?: string;
  // The timeline's marks (performance.now() ms; absent: the phase did not happen).
  /** Placed (a lease or a forward reserved), after any queue wait. */
  placedAt?: number;
  /** The candidates of the decision that placed it. */
  cands?: readonly Candidate[];
  /** Sent to its member. */
  forwardAt?: number;
  /** A local slot granted. */
  grantedAt?: number;
  /** The engine called. */
  engineAt?: number;
  /** A whole answer's end of prefill: the engine call plus the engine's own prompt time (llama-server's `timings.prompt_ms`); a stream's is its first content. */
  prefilledAt?: number;
  /** Ended (recorded). */
  endedAt?: number;
  /** A forward's: the traceparent claim its entry sent (continued only when tracing is on). */
  parent?: string;
  /** OpenTelemetry's part (telemetry/), only when tracing is on. */
  span?: EntrySpan;
}

let nextId = 0;

export function newTrace(executor: string | null, route: Trace['route']): Trace {
  return { executor, route, queuedMs: 0, startedAt: performance.now(), outcome: 'ok', known: false, id: ++nextId };
}

/** How a run answers: who sent it here, why it runs where it does, how long it waited, and extra headers (an alias's). */
export interface ResponseMeta {
  origin: string;
  route: RouteReason;
  queuedMs: number;
  extra: Record<string, string>;
}

/** The headers that say where a request ran and why (SPEC section 4). */
export function meshHeaders(executor: string, origin: string, route: RouteReason, queuedMs: number): Record<string, string> {
  return { [RES_NODE]: executor, [RES_ORIGIN]: origin, [RES_ROUTE]: route, [RES_QUEUED_MS]: String(queuedMs) };
}

/** The metric label and feed entry of a request for a model no member serves. */
export const UNKNOWN_MODEL = 'unknown';
/** The decision feed keeps at most this many characters of a model name. */
const FEED_NAME_MAX = 128;

/** The request ended: one feed entry and its metrics. `clientModel`: the name the client sent (an alias's own). */
export function recordRequest(p: DispatchPorts, r: Routed, clientModel: string, entry: string, trace: Trace): void {
  // Labels and the feed stay bounded whatever clients send: a model nobody serves is the label `unknown`,
  // and the feed keeps at most the start of its name (an operator still sees the typo).
  trace.endedAt = performance.now();
  p.metrics.requests.inc({ model: trace.known ? r.model : UNKNOWN_MODEL, workload: r.workload, route: trace.route, outcome: trace.outcome });
  p.decisions.add({
    at: Date.now(),
    entry,
    executor: trace.executor,
    model: r.model.length > FEED_NAME_MAX ? `${r.model.slice(0, FEED_NAME_MAX)}…` : r.model,
    workload: r.workload,
    route: trace.route,
    queued_ms: trace.queuedMs,
    ttft_ms: trace.firstContentAt === undefined ? null : Math.round(trace.firstContentAt - trace.startedAt),
    outcome: trace.outcome,
    ...(r.alias !== undefined ? { alias: clientModel.slice(0, FEED_NAME_MAX) } : {}),
    predicted_cached: trace.predictedCached ?? null,
    cached_tokens: trace.cachedTokens ?? null,
    ...(trace.slot !== undefined ? { slot: trace.slot } : {}),
    ...(trace.evicted ? { evicted_tokens: trace.evicted.tokens, evicted_idle_ms: Math.round(trace.evicted.idleMs) } : {}),
    ...(trace.restored !== undefined ? { restored_tokens: trace.restored } : {}),
    ...(trace.move ? { moved_from: trace.move.from, move_outcome: trace.move.outcome, moved_tokens: trace.move.tokens, ...(trace.move.bytes !== undefined ? { moved_bytes: trace.move.bytes } : {}), ...(trace.move.ms !== undefined ? { moved_ms: trace.move.ms } : {}) } : {}),
    ...(trace.continued ? { continued_from: trace.continued.from, continued_tokens: trace.continued.tokens } : {}),
    timeline: trace.origin ?? `${p.name}:${trace.id}`,
  });
  p.timelines?.add(p.decisions.newest!, trace, r.pricedTokens);
  p.tracing?.finish(trace, r.model, r.workload, p.name);
  p.history?.request(trace.known ? r.model : UNKNOWN_MODEL, trace, Date.now());
  const op = trace.known && trace.route !== 'forwarded' ? genAiOperation(r.workload) : undefined;
  if (op !== undefined) {
    // Once per client request, at its entry (a forward's executor would count it twice).
    const labels = { gen_ai_operation_name: op, gen_ai_request_model: r.model, gen_ai_provider_name: 'viiwork' };
    if (trace.firstContentAt !== undefined) p.metrics.genAiTtft.observe(labels, (trace.firstContentAt - trace.startedAt) / 1000);
    const errorType = genAiErrorType(trace.outcome);
    p.metrics.genAiDuration.observe(errorType !== undefined ? { ...labels, error_type: errorType } : labels, (performance.now() - trace.startedAt) / 1000);
  }
  if (trace.executor !== null && trace.predictedCached !== undefined && trace.known && trace.route !== 'forwarded') {
    // Both series exist from the first such request (one counts 0), so a panel of either shows 0, never nothing.
    const checked = trace.cachedTokens !== undefined;
    const labels = { model: r.model, host: trace.executor };
    p.metrics.cachePredictions.inc({ ...labels, checked: checked ? 'yes' : 'no' }, 1);
    p.metrics.cachePredictions.inc({ ...labels, checked: checked ? 'no' : 'yes' }, 0);
  }
  if (trace.executor !== null && trace.predictedCached !== undefined && trace.cachedTokens !== undefined && trace.known && trace.route !== 'forwarded') {
    // How well routing knows the caches: the entry's prediction against the engine's count. A forward's executor
    // keeps its own (better informed) prediction in its feed, but the metric measures entry nodes only.
    const labels = { model: r.model, host: trace.executor };
    p.metrics.cachePredictionError.observe(labels, Math.abs(trace.predictedCached - trace.cachedTokens));
    p.metrics.cachedTokens.inc({ ...labels, source: 'predicted' }, trace.predictedCached);
    p.metrics.cachedTokens.inc({ ...labels, source: 'engine' }, trace.cachedTokens);
  }
}
