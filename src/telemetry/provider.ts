/**
 * The OpenTelemetry SDK's part of tracing: the provider with its sampler and
 * OTLP/HTTP exporter. Kept apart from tracing.ts so that a node with tracing
 * off (the default) never loads the SDK: it costs a third of a second of CPU
 * at every start.
 */
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor, ParentBasedSampler, TraceIdRatioBasedSampler } from '@opentelemetry/sdk-trace-base';

export interface ProviderOptions {
  /** The traces URL itself (tracing.ts `tracesUrl` made it from the config or the OTEL_* variables). */
  endpoint: string;
  sample: number;
  node: string;
  version: string;
  /** An export the collector refused or that did not reach it: what went wrong (its HTTP status when there was one). */
  onExportError?: (why: string) => void;
}

/** The exporter's result: code 0 is success (@opentelemetry/core's ExportResultCode). */
type ExportResult = { code: number; error?: Error & { code?: number } };
type Exporter = { export(spans: never[], done: (r: ExportResult) => void): void; shutdown(): Promise<void>; forceFlush?(): Promise<void> };

/** The OTLP exporter, with each failed export told (a collector answering 404 was silent before: issue 44). */
function watched(inner: Exporter, onError: ((why: string) => void) | undefined): Exporter {
  if (!onError) return inner;
  return {
    export: (spans, done) =>
      inner.export(spans, (r) => {
        if (r.code !== 0) onError(r.error?.code !== undefined ? `the collector answered ${r.error.code}` : (r.error?.message ?? 'unknown error'));
        done(r);
      }),
    shutdown: () => inner.shutdown(),
    forceFlush: () => inner.forceFlush?.() ?? Promise.resolve(),
  };
}

export function makeProvider(o: ProviderOptions): BasicTracerProvider {
  return new BasicTracerProvider({
    resource: resourceFromAttributes({ 'service.name': 'viiwork', 'service.version': o.version, 'service.instance.id': o.node, 'host.name': o.node }),
    sampler: new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(o.sample) }),
    spanProcessors: [new BatchSpanProcessor(watched(new OTLPTraceExporter({ url: o.endpoint }) as unknown as Exporter, o.onExportError) as unknown as OTLPTraceExporter, { scheduledDelayMillis: 1000 })],
  });
}
