/**
 * OpenTelemetry traces (SPEC section 10), made with the official SDK and
 * exported over OTLP/HTTP (protobuf) when `telemetry.otlp_endpoint` is set.
 *
 * The entry's span starts when a request arrives (continuing a client's
 * valid `traceparent`); its children (queue, route, forward, and when it
 * runs here slot, prefill, decode) are made when it ends, from the marks the
 * request's Trace collected. A forward carries the entry span's context in
 * its signed claims; the executor's span is that span's child, with its own
 * slot, prefill and decode. With tracing off nothing here is made: the
 * dispatcher's port is absent.
 */
import { context, SpanKind, SpanStatusCode, trace, TraceFlags, type Attributes, type Context, type Span, type Tracer } from '@opentelemetry/api';
import { genAiErrorType, genAiOperation, GEN_AI_SEMCONV } from '../metrics/gen-ai.ts';
import type { ProviderOptions } from './provider.ts';
import { formatTraceparent, parseTraceparent } from './traceparent.ts';

/** What tracing reads of a request as it ends (dispatch/trace.ts's Trace has these fields). */
export interface SpanFacts {
  readonly executor: string | null;
  readonly route: string;
  readonly outcome: string;
  readonly queuedMs: number;
  readonly startedAt: number;
  readonly placedAt?: number;
  readonly forwardAt?: number;
  readonly grantedAt?: number;
  readonly engineAt?: number;
  readonly firstContentAt?: number;
  readonly prefilledAt?: number;
  readonly endedAt?: number;
  readonly promptTokens?: number;
  readonly completionTokens?: number;
  readonly cachedTokens?: number;
  readonly predictedCached?: number;
  /** A forward's: its entry's traceparent claim. */
  readonly parent?: string;
  readonly span?: EntrySpan;
  readonly cands?: readonly { host: string }[];
}

/** The entry's span of one request, and the context its forward carries. */
export class EntrySpan {
  constructor(
    readonly span: Span,
    readonly ctx: Context,
    readonly traceparent: string | undefined,
  ) {}
}

export type TracingOptions = ProviderOptions;

/**
 * The URL traces are posted to, as OpenTelemetry's convention has it (issue
 * 44: a base URL posted to `/`, which collectors answer 404): the config's
 * `telemetry.otlp_endpoint`, with `/v1/traces` added when it has no path;
 * when the config is silent, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as it is,
 * else `OTEL_EXPORTER_OTLP_ENDPOINT` (a base) plus `/v1/traces`. Empty: off.
 */
export function tracesUrl(configured: string, env: Record<string, string | undefined>): string {
  const withPath = (base: string, always: boolean) => {
    let u: URL;
    try {
      u = new URL(base);
    } catch {
      return base;
    }
    if (always || u.pathname === '/' || u.pathname === '') u.pathname = `${u.pathname.replace(/\/+$/, '')}/v1/traces`;
    return u.toString();
  };
  if (configured) return withPath(configured, false);
  const traces = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim();
  if (traces) return traces;
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim();
  return base ? withPath(base, true) : '';
}

/** Tracing as `telemetry` and the OTEL_* variables ask for it (tracesUrl), failed exports logged and counted; undefined: off. */
export function tracingFor(
  t: { otlp_endpoint: string; sample: number },
  env: Record<string, string | undefined>,
  o: { node: string; version: string; log: (msg: string) => void; failed: () => void },
): Tracing | undefined {
  const endpoint = tracesUrl(t.otlp_endpoint, env);
  if (!endpoint) return undefined;
  return new Tracing({ endpoint, sample: t.sample, node: o.node, version: o.version, onExportError: exportErrorReporter(o.log, o.failed, endpoint) });
}

/** Reports of failed exports, at most one a `everyMs` (the count goes on in /metrics). */
export function exportErrorReporter(log: (msg: string) => void, count: () => void, url: string, now: () => number = Date.now, everyMs = 60_000): (why: string) => void {
  let last = -Infinity;
  let missed = 0;
  return (why) => {
    count();
    if (now() - last < everyMs) {
      missed++;
      return;
    }
    log(`OpenTelemetry export to ${url} failed: ${why}${missed ? ` (and ${missed} more since the last report)` : ''}; check telemetry.otlp_endpoint`);
    last = now();
    missed = 0;
  };
}

/** performance.now() ms → Unix ms, the SDK's time input. */
const wall = (perfMs: number) => performance.timeOrigin + perfMs;

export class Tracing {
  #provider: { shutdown(): Promise<void> } | undefined;
  // The API's no-op tracer until the SDK is loaded; the node awaits `ready` before it takes requests.
  #tracer: Tracer = trace.getTracer('viiwork');
  /** The SDK loaded and the provider made (telemetry/provider.ts, imported only when tracing is on). */
  readonly ready: Promise<void>;

  constructor(readonly o: TracingOptions) {
    this.ready = import('./provider.ts').then(({ makeProvider }) => {
      const provider = makeProvider(o);
      this.#provider = provider;
      this.#tracer = provider.getTracer('viiwork', o.version, { schemaUrl: `urn:viiwork:gen_ai:${GEN_AI_SEMCONV}` });
    });
  }

  /** A client's request arrived: the entry span, continuing its traceparent when that is valid (junk is ignored). */
  begin(clientTraceparent: string | undefined, startedAt: number): EntrySpan {
    const parent = remoteContext(clientTraceparent);
    const span = this.#tracer.startSpan('viiwork.request', { kind: SpanKind.SERVER, startTime: wall(startedAt), attributes: { 'gen_ai.provider.name': 'viiwork' } }, parent);
    const sc = span.spanContext();
    const sampled = (sc.traceFlags & TraceFlags.SAMPLED) === TraceFlags.SAMPLED;
    return new EntrySpan(span, trace.setSpan(parent, span), formatTraceparent({ traceId: sc.traceId, spanId: sc.spanId, sampled }));
  }

  /**
   * A request ended here: the entry span's children and end, or (a forward's
   * executor) the executor's span under the entry's, with its own children.
   */
  finish(f: SpanFacts, model: string, workload: string, self: string): void {
    const end = f.endedAt ?? performance.now();
    const op = genAiOperation(workload);
    const name = `${op ?? workload} ${model}`;
    const attrs: Attributes = { 'gen_ai.operation.name': op ?? workload, 'gen_ai.request.model': model, 'gen_ai.provider.name': 'viiwork', 'viiwork.node': self, 'viiwork.route': f.route, 'viiwork.outcome': f.outcome };
    if (f.executor) attrs['viiwork.executor'] = f.executor;
    let root: Span;
    let ctx: Context;
    if (f.span) {
      root = f.span.span;
      ctx = f.span.ctx;
    } else {
      // A forward's executor: a child of the entry's span when the claim carries it, else a trace of its own.
      const parent = remoteContext(f.parent);
      root = this.#tracer.startSpan(name, { kind: SpanKind.SERVER, startTime: wall(f.startedAt) }, parent);
      ctx = trace.setSpan(parent, root);
    }
    root.updateName(name);
    usage(attrs, f);
    root.setAttributes(attrs);
    const child = (n: string, from: number | undefined, to: number | undefined, a: Attributes = {}, kind = SpanKind.INTERNAL) => {
      if (from === undefined || to === undefined || to < from) return;
      this.#tracer.startSpan(n, { kind, startTime: wall(from), attributes: a }, ctx).end(wall(to));
    };
    if (f.placedAt !== undefined && f.queuedMs > 0) child('queue', f.startedAt, f.placedAt);
    if (f.placedAt !== undefined) child('route', f.placedAt, f.placedAt, { 'viiwork.route': f.route, 'viiwork.route.host': f.executor ?? '', 'viiwork.route.candidates': f.cands?.length ?? 0 });
    if (f.forwardAt !== undefined) child('forward', f.forwardAt, end, { 'server.address': f.executor ?? '' }, SpanKind.CLIENT);
    else {
      child('slot', f.placedAt ?? f.startedAt, f.grantedAt);
      const first = f.firstContentAt ?? f.prefilledAt;
      child('prefill', f.engineAt, first ?? end);
      if (first !== undefined) child('decode', first, end);
    }
    const errorType = genAiErrorType(f.outcome);
    if (errorType !== undefined) {
      root.setAttribute('error.type', errorType);
      root.setStatus({ code: SpanStatusCode.ERROR, message: `ended ${f.outcome}` });
    }
    root.end(wall(end));
  }

  async stop(): Promise<void> {
    await this.ready.catch(() => {});
    await this.#provider?.shutdown().catch(() => {});
  }
}

function usage(attrs: Attributes, f: SpanFacts): void {
  if (f.promptTokens !== undefined) attrs['gen_ai.usage.input_tokens'] = f.promptTokens;
  if (f.completionTokens !== undefined) attrs['gen_ai.usage.output_tokens'] = f.completionTokens;
  if (f.cachedTokens !== undefined) attrs['gen_ai.usage.cache_read.input_tokens'] = f.cachedTokens;
  if (f.predictedCached !== undefined) attrs['viiwork.cache.predicted_input_tokens'] = f.predictedCached;
}

/** The context of a remote parent named by a traceparent; the root context for none or junk. */
function remoteContext(text: string | undefined): Context {
  const p = parseTraceparent(text);
  if (!p) return context.active();
  return trace.setSpanContext(context.active(), { traceId: p.traceId, spanId: p.spanId, traceFlags: p.sampled ? TraceFlags.SAMPLED : TraceFlags.NONE, isRemote: true });
}
