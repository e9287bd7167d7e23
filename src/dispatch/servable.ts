/** The checks a request meets before it waits or runs anywhere (SPEC section 4), and what a failed placement answers. */
import { errors, type ApiError } from '../http/errors.ts';
import { candidates, hostDoes } from '../route/eligibility.ts';
import type { Candidate, HostView } from '../route/types.ts';
import type { DispatchPorts } from './ports.ts';
import type { Failure } from './entry/steps.ts';

/** The hosts that can do this request, on what the snapshot knows (forwards in flight and refusal marks deducted). */
export function candidatesFor(p: DispatchPorts, r: { model: string; workload: string; priority?: string }, hosts: readonly HostView[] = p.snapshot()): Candidate[] {
  return candidates({ hosts, forwards: p.forwards.tally, marks: p.forwards.marks }, r.model, r.workload, r.priority === 'batch');
}

/** Nothing capable is healthy, and something is still loading: a timeout then says "loading". */
export function onlyLoading(p: DispatchPorts, r: { model: string; workload: string; priority?: string }): boolean {
  const c = candidatesFor(p, r);
  return !c.some((x) => x.healthy) && c.some((x) => x.loading);
}

/** Is any capable host with a healthy backend left for this request (apart from those whose engine failed it)? */
export function routeLeft(p: DispatchPorts, r: { model: string; workload: string; priority?: string }, failed: readonly string[]): boolean {
  return candidatesFor(p, r).some((c) => c.healthy && !failed.includes(c.host) && (c.fresh || c.local));
}

/**
 * A request that was waiting here before this node began draining, for a model no other member can run: this node
 * is still a candidate for it (SPEC section 13: what a draining node queued finishes; only new work goes elsewhere).
 */
export function queuedBeforeDrain(p: DispatchPorts, r: { model: string; workload: string; priority?: string }, hosts: readonly HostView[], arrived: number): Candidate[] {
  const since = p.drainingSince?.();
  if (since === undefined || arrived >= since) return [];
  return candidatesFor(p, r, hosts.map((h) => (h.local && h.draining ? { ...h, draining: false } : h)));
}

/** The hosts that could run this request (on its pinned host, if any) but are draining (SPEC section 13). */
function drainingHosts(r: { model: string; workload: string; pin: string | undefined }, hosts: readonly HostView[]): string[] {
  return hosts.filter((h) => h.draining && h.models.has(r.model) && hostDoes(h.models.get(r.model)!, r.workload) && (r.pin === undefined || h.name === r.pin)).map((h) => h.name);
}

/**
 * A request with no candidate left because the hosts that could run it began draining while it waited: 503
 * `draining` now, not a wait to its queue_timeout for hosts that will take nothing new. Undefined when none drains.
 */
export function drainedAway(r: { model: string; workload: string; pin: string | undefined }, hosts: readonly HostView[]): ApiError | undefined {
  const waiting = drainingHosts(r, hosts);
  return waiting.length ? errors.draining(r.model, waiting) : undefined;
}

/** 404 / 400 / 503 before any waiting, from every host that reports the model (fresh or stale). */
export function checkServable(r: { model: string; workload: string; pin: string | undefined }, hosts: readonly HostView[], cands: Candidate[]): void {
  const serving = hosts.filter((h) => h.models.has(r.model));
  if (serving.length === 0) throw errors.unknownModel(r.model);
  // Hosts that could run it but are draining (SPEC section 13): a clear 503 to retry, not a workload the mesh lacks.
  const draining = () => drainingHosts(r, serving);
  if (r.pin !== undefined) {
    if (!serving.some((h) => h.name === r.pin)) throw errors.unknownHost(r.pin, r.model);
    if (!cands.some((c) => c.host === r.pin) && draining().length) throw errors.draining(r.model, draining());
    if (!cands.some((c) => c.host === r.pin)) throw errors.unsupportedWorkload(r.model, r.workload, `member "${r.pin}"`);
  }
  if (cands.length === 0) {
    const waiting = draining();
    if (waiting.length) throw errors.draining(r.model, waiting);
    throw errors.unsupportedWorkload(r.model, r.workload);
  }
  // A backend still loading counts as full: the request waits for it (up to queue_timeout).
  // An on-demand target that is not loaded can be (SPEC section 11): the request waits for its load.
  if (!cands.some((c) => c.healthy || c.loading || c.available)) throw errors.noHealthyBackend(r.model);
}

/** The error a request that could not be placed ends with. */
export function failureError(f: Failure, model: string, timeoutMs: number, engineError: string | undefined): ApiError {
  switch (f) {
    case 'queue-full':
      return errors.queueFull(model);
    case 'queue-timeout':
      return errors.queueTimeout(model, timeoutMs);
    case 'queue-timeout-refused':
      return errors.queueTimeoutRefused(model, timeoutMs);
    case 'engine-failed':
      return errors.engineFailed(engineError ?? 'no detail');
  }
}
