/**
 * The series a node keeps (SPEC section 10, docs/api.md "GET /v1/history").
 * `request` series are made of the requests this node recorded (entered
 * here, or run here for a member), per model and per host that ran them;
 * `gauge` series are read every step from this node's own state and, for
 * every member, from its last capacity report; `node` series have no model.
 */
export const SERIES = {
  requests: { unit: 'req/s', of: 'request', doc: 'requests that ended, per second' },
  rejected: { unit: 'req/s', of: 'request', doc: 'requests answered 429 (queue full or timed out), per second' },
  errors: { unit: 'req/s', of: 'request', doc: 'requests answered 5xx or broken off, per second' },
  ttft_p50: { unit: 'ms', of: 'request', doc: 'median time from arrival at the entry to the first content' },
  ttft_p95: { unit: 'ms', of: 'request', doc: '95th percentile of the same' },
  queue_wait: { unit: 'ms', of: 'request', doc: 'mean time requests waited in the queue before placement' },
  tokens_in: { unit: 'tokens/s', of: 'request', doc: 'prompt tokens of requests run here, per second' },
  tokens_out: { unit: 'tokens/s', of: 'request', doc: 'completion tokens of requests run here, per second' },
  cached_share: { unit: '0-1', of: 'request', doc: 'share of the prompt tokens run here that the engine served from its cache, of answers whose engine counts it (none: no point)' },
  cache_error: { unit: 'tokens', of: 'request', doc: 'mean absolute difference between the cached tokens routing predicted and the engine counted' },
  slots: { unit: 'slots', of: 'gauge', doc: 'slots of the model on the host (this node now; members from their last report)' },
  slots_busy: { unit: 'slots', of: 'gauge', doc: 'slots busy on the host' },
  queue_depth: { unit: 'requests', of: 'gauge', doc: 'requests waiting in the host’s queues for the model' },
  ttft_score: { unit: 'ms', of: 'gauge', doc: 'the host’s published first-token overhead score for the model' },
  refusals: { unit: 'req/s', of: 'node', doc: 'forwards of this node refused by their member (no free slot there), per second' },
  members_alive: { unit: 'members', of: 'node', doc: 'members this node sees alive, itself included' },
} as const satisfies Record<string, { unit: string; of: 'request' | 'gauge' | 'node'; doc: string }>;

export type SeriesName = keyof typeof SERIES;

export const SERIES_NAMES = Object.keys(SERIES) as SeriesName[];

export function isSeriesName(s: string): s is SeriesName {
  return Object.hasOwn(SERIES, s);
}
