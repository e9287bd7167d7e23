/**
 * What one request leaves behind (SPEC section 10): the decision feed's
 * entry and the request metrics, filled in as the request goes (a `Trace`)
 * and written once when it ends (`recordRequest`); and the response headers
 * that say where it ran.
 */
import { RES_NODE, RES_ORIGIN, RES_QUEUED_MS, RES_ROUTE } from '../http/viiwork-headers.ts';
import type { RouteReason } from '../route/types.ts';
import type { DispatchPorts } from './ports.ts';
import type { Routed } from './types.ts';

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
}

export function newTrace(executor: string | null, route: Trace['route']): Trace {
  return { executor, route, queuedMs: 0, startedAt: performance.now(), outcome: 'ok', known: false };
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
  });
  if (trace.executor !== null && trace.predictedCached !== undefined && trace.cachedTokens !== undefined && trace.known && trace.route !== 'forwarded') {
    // How well routing knows the caches: the entry's prediction against the engine's count. A forward's executor
    // keeps its own (better informed) prediction in its feed, but the metric measures entry nodes only.
    const labels = { model: r.model, host: trace.executor };
    p.metrics.cachePredictionError.observe(labels, Math.abs(trace.predictedCached - trace.cachedTokens));
    p.metrics.cachedTokens.inc({ ...labels, source: 'predicted' }, trace.predictedCached);
    p.metrics.cachedTokens.inc({ ...labels, source: 'engine' }, trace.cachedTokens);
  }
}
