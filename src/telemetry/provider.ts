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
  endpoint: string;
  sample: number;
  node: string;
  version: string;
}

export function makeProvider(o: ProviderOptions): BasicTracerProvider {
  return new BasicTracerProvider({
    resource: resourceFromAttributes({ 'service.name': 'viiwork', 'service.version': o.version, 'service.instance.id': o.node, 'host.name': o.node }),
    sampler: new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(o.sample) }),
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url: o.endpoint }), { scheduledDelayMillis: 1000 })],
  });
}
