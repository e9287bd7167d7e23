/**
 * The OpenTelemetry GenAI semantic conventions this node follows, in one
 * place: metrics here, span attributes in telemetry/. The conventions'
 * status is "development", so we pin the names as the JS package of the
 * conventions publishes them in its incubating entry, version 1.45.0
 * (docs/decisions.md).
 */
import type { Workload } from '../workloads/workloads.ts';

/** The package whose incubating (experimental) GenAI names we use, as installed beside the SDK. */
export const GEN_AI_SEMCONV = '@opentelemetry/semantic-conventions 1.45.0';

/** gen_ai.operation.name of a workload; undefined for work the conventions have no name for (rerank, audio). */
export function genAiOperation(workload: Workload | string): 'chat' | 'text_completion' | 'embeddings' | undefined {
  switch (workload) {
    case 'chat':
      return 'chat';
    case 'completion':
      return 'text_completion';
    case 'embeddings':
      return 'embeddings';
    default:
      return undefined;
  }
}

/**
 * error.type of a request that ended with `outcome` (an HTTP status, or `aborted`, `error`, …): the outcome
 * itself unless it is a 2xx status. Checked by character codes, as /^2\d\d$/ would, without a regular
 * expression on every request.
 */
export function genAiErrorType(outcome: string): string | undefined {
  if (outcome.length === 3 && outcome.charCodeAt(0) === 50) {
    const d1 = outcome.charCodeAt(1) - 48;
    const d2 = outcome.charCodeAt(2) - 48;
    if (d1 >= 0 && d1 <= 9 && d2 >= 0 && d2 <= 9) return undefined;
  }
  return outcome;
}

/** The conventions' advised bucket boundaries, seconds. */
export const TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10];
export const DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92];
