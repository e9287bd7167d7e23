/**
 * Which host loads a model (SPEC section 11, placement). Pure: hosts with
 * their memory and idle models in, the host to ask out, or none.
 *
 * First the hosts where the model fits in free memory, then those where it
 * fits after unloading idle on-demand models (a model with a request running
 * or queued is never idle; an `always` model is never unloaded); each group
 * ranked by the rendezvous hash of (model, host), so every entry node picks
 * the same host for the same model. A host that refused moves the choice to
 * the next one.
 */
import { rendezvousRank } from '../hashing/rendezvous.ts';
import { eligibleTargets } from './eligibility.ts';
import { planSplit } from './split-plan.ts';
import type { HostView } from './types.ts';

/** What placement knows of one host that could load the model. */
export interface LoadHost {
  host: string;
  /** Bytes one copy of the model needs there. */
  need: number;
  /** Free bytes of its budget. */
  free: number;
  /** Bytes its idle on-demand models hold (what unloading them would free). */
  idle: number;
  /** false: it must fetch the model's file from a member first (absent: unknown, ranked as having it). */
  hasFile?: boolean;
  /** The entry there may run split across members (SPEC section 11): who may lend to it. */
  split?: 'auto' | readonly string[];
}

/** A member that lends memory (node.lend_memory: true), with its free bytes. */
export interface Lender {
  name: string;
  free: number;
}

export interface LoadChoice {
  host: string;
  /** `free`: fits without unloading anything; `unload`: after unloading idle models; `split`: runs it with lenders' memory. */
  fits: 'free' | 'unload' | 'split';
}

/** The rendezvous key of a model's placement (distinct from session keys). */
export const placementKey = (model: string) => `load\0${model}`;

/** The host to ask, best first: fits in free memory, then fits after unloading; each by rendezvous of (model, host). */
export function rankLoadHosts(model: string, hosts: readonly LoadHost[], refused: readonly string[] = [], lenders: readonly Lender[] = []): LoadChoice[] {
  const open = hosts.filter((h) => !refused.includes(h.host));
  const free = open.filter((h) => h.need <= h.free);
  const unload = open.filter((h) => h.need > h.free && h.need <= h.free + h.idle);
  // Bigger than each host (SPEC section 11): the runner is the host with the most free memory whose lenders hold the rest.
  const split = open
    .filter((h) => h.split !== undefined && h.need > h.free + h.idle)
    .filter((h) => splitFits(h, lenders))
    .sort((a, b) => b.free - a.free || (a.host < b.host ? -1 : 1));
  // SPEC section 11: within each group, hosts that have the file before hosts that must fetch it.
  const rank = (list: LoadHost[]) => [
    ...rendezvousRank(placementKey(model), list.filter((h) => h.hasFile !== false).map((h) => h.host)),
    ...rendezvousRank(placementKey(model), list.filter((h) => h.hasFile === false).map((h) => h.host)),
  ];
  return [...rank(free).map((host) => ({ host, fits: 'free' as const })), ...rank(unload).map((host) => ({ host, fits: 'unload' as const })), ...split.map((h) => ({ host: h.host, fits: 'split' as const }))];
}

/** Whether `h` running the model with the lenders' free memory holds it (route/split-plan.ts). */
function splitFits(h: LoadHost, lenders: readonly Lender[]): boolean {
  const members = [{ name: h.host, free: h.free, runs: true, lends: false }, ...lenders.filter((l) => l.name !== h.host).map((l) => ({ name: l.name, free: l.free, runs: false, lends: true }))];
  return planSplit({ need: h.need, members, split: h.split ?? 'auto', runner: h.host }).kind === 'split';
}

/** The members that lend memory, from the snapshot: fresh, not draining, lending. */
export function lendersOf(hosts: readonly HostView[]): Lender[] {
  return hosts.filter((h) => h.lends && (h.fresh || h.local) && !h.draining && h.memory).map((h) => ({ name: h.name, free: h.memory!.free }));
}

export function chooseLoadHost(model: string, hosts: readonly LoadHost[], refused: readonly string[] = []): LoadChoice | undefined {
  return rankLoadHosts(model, hosts, refused)[0];
}

/**
 * The hosts that could load (model, workload) from the routing snapshot:
 * fresh (or this node), with an on-demand eligible target unloaded there.
 * With `scale`, only hosts that do not already hold a copy (one more copy).
 */
export function loadHosts(hosts: readonly HostView[], model: string, workload: string): LoadHost[] {
  const out: LoadHost[] = [];
  for (const h of hosts) {
    if ((!h.fresh && !h.local) || h.draining) continue;
    const m = h.models.get(model);
    if (!m) continue;
    const targets = eligibleTargets(m, workload);
    const unloaded = targets.filter((t) => t.onDemand && t.state === 'unloaded');
    if (unloaded.length === 0) continue;
    // A host that holds a copy (loaded or on its way) is not asked to load another.
    if (targets.some((t) => t.state === 'loaded' || t.state === 'loading' || t.state === 'fetching')) continue;
    const need = Math.min(...unloaded.map((t) => t.memory ?? 0));
    const mem = h.memory;
    if (!mem) continue;
    let idle = 0;
    for (const [name, other] of h.models) {
      // Idle: on demand, loaded, no request running there and none queued there for the model.
      if ((other.queued ?? 0) > 0) continue;
      for (const t of other.targets ?? []) if (t.onDemand && t.state === 'loaded' && t.busy === 0 && name !== model) idle += t.memory ?? 0;
    }
    const split = unloaded.find((t) => t.split)?.split?.lenders;
    out.push({ host: h.name, need, free: mem.free, idle, ...(m.hasFile !== undefined ? { hasFile: m.hasFile } : {}), ...(split ? { split } : {}) });
  }
  return out;
}

/** The workload an operator's placement of `model` loads it for: its first on-demand target's first, else chat. */
export function onDemandWorkload(hosts: readonly HostView[], model: string): string {
  return hosts.flatMap((h) => h.models.get(model)?.targets ?? []).find((t) => t.onDemand)?.descriptor.workloads[0] ?? 'chat';
}
