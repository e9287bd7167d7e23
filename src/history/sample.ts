/**
 * The gauges of one step, read from the routing snapshot: for every host
 * (this node as it is now, each member from its last capacity report) and
 * model, its slots, busy slots, queue and published first-token score.
 */
import type { HostView } from '../route/types.ts';
import type { History } from './store.ts';

/** `queuedHere`: requests waiting in this node's own queues for a model (a member's come from its report). */
export function sampleHosts(h: History, hosts: readonly HostView[], queuedHere: (model: string) => number, now: number): void {
  for (const host of hosts) {
    // A report past stale_after says nothing about now: its member's gauges get no point rather than an old one.
    if (!host.local && !host.fresh) continue;
    for (const [model, m] of host.models) {
      h.gauge('slots', host.name, model, m.slots, now);
      h.gauge('slots_busy', host.name, model, m.busy, now);
      h.gauge('queue_depth', host.name, model, host.local ? queuedHere(model) : (m.queued ?? 0), now);
      if (m.overheadMs !== undefined && (m.perfSamples ?? 0) > 0) h.gauge('ttft_score', host.name, model, m.overheadMs, now);
    }
  }
}
