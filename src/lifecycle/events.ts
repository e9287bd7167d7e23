/**
 * Each load and unload told to operators (SPEC section 11): one log line
 * saying why (a warning when it failed or was refused), the model load and
 * unload counters, and an entry in the decision feed the dashboards show.
 */
import type { Log } from '../log.ts';
import type { Metrics } from '../metrics/metrics.ts';
import type { LifecycleEvent } from './lifecycle.ts';

/** A lifecycle entry of the decision feed (dispatch/decisions.ts): route `load` or `unload`, outcome the event. */
export interface LifecycleFeedEntry {
  at: number;
  entry: string;
  executor: string;
  model: string;
  workload: string;
  route: 'load' | 'unload';
  queued_ms: number;
  ttft_ms: null;
  outcome: string;
  lifecycle: { event: string; reason: string; detail: string; parts?: { member: string; bytes: number }[] };
}

export interface EventSinks {
  /** This node's name: the entry and executor of its own loads. */
  readonly node: string;
  readonly log: Pick<Log, 'info' | 'warn'>;
  readonly metrics: Pick<Metrics, 'modelLoads' | 'modelUnloads'>;
  readonly feed: { add(d: LifecycleFeedEntry): void };
  /** Unix ms for the feed (Date.now by default). */
  wallClock?(): number;
}

/** The log line of an event, in words an operator reads. */
export function eventLine(e: LifecycleEvent): string {
  return {
    loading: `loading ${e.model} (${e.reason}): ${e.detail}`,
    loaded: `loaded ${e.model} (${e.reason}): ${e.detail}`,
    'load-failed': `load of ${e.model} failed: ${e.detail}`,
    refused: `refused to load ${e.model}: ${e.detail}`,
    unloading: `unloading ${e.model} (${e.reason}): ${e.detail}`,
    unloaded: `unloaded ${e.model} (${e.reason})`,
  }[e.kind];
}

/** One log line, the metrics and (but for `unloaded`) one feed entry for an event. */
export function reportLifecycleEvent(e: LifecycleEvent, s: EventSinks): void {
  const line = eventLine(e);
  if (e.kind === 'load-failed' || e.kind === 'refused') s.log.warn(line);
  else s.log.info(line);
  if (e.kind === 'loaded') s.metrics.modelLoads.inc({ model: e.model, reason: e.reason });
  if (e.kind === 'unloaded') s.metrics.modelUnloads.inc({ model: e.model, reason: e.reason });
  if (e.kind === 'load-failed') s.metrics.modelUnloads.inc({ model: e.model, reason: 'failed' });
  if (e.kind === 'unloaded') return;
  s.feed.add({
    at: (s.wallClock ?? Date.now)(),
    entry: s.node,
    executor: s.node,
    model: e.model,
    workload: '-',
    route: e.kind === 'unloading' ? 'unload' : 'load',
    queued_ms: 0,
    ttft_ms: null,
    outcome: e.kind,
    lifecycle: { event: e.kind, reason: e.reason, detail: e.detail.slice(0, 512), ...(e.parts ? { parts: e.parts } : {}) },
  });
}
