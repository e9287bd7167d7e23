/**
 * Which hosts can do a request (SPEC sections 7–9, step 4): per target, from
 * that target's own descriptor, before anything else. A host's free slots
 * for a workload are the sum over its eligible targets, less this node's
 * forwards the report does not show (by its `your_busy` count, else by the
 * poll's time), and zero while a refusal mark newer than the report stands.
 */
import { LEGACY_DESCRIPTOR, descriptorDoes, descriptorKey, isKnownWorkload, type Descriptor } from '../workloads/workloads.ts';
import type { Candidate, ForwardRecord, ForwardTally, HostModelView, HostView, RefusalMark, TargetView } from './types.ts';

/** The targets of a host's model that do this workload (an older node's model counts as one chat/completion target). */
export function eligibleTargets(m: HostModelView, workload: string): TargetView[] {
  if (!isKnownWorkload(workload)) return [];
  const targets = m.targets ?? [{ descriptor: LEGACY_DESCRIPTOR, slots: m.slots, busy: m.busy }];
  return targets.filter((t) => descriptorDoes(t.descriptor, workload));
}

/** Does any target of this model, on this host, do the workload? */
export function hostDoes(m: HostModelView, workload: string): boolean {
  return eligibleTargets(m, workload).length > 0;
}

export interface CandidateInputs {
  hosts: readonly HostView[];
  /**
   * What this node's forwards to `host` for `model` change in a report of its target `target` polled at `polledAt`;
   * `yourBusy`: the report's own count of them (then no poll time is guessed at).
   */
  forwards: (host: string, model: string, target: string, polledAt: number, yourBusy?: number) => ForwardTally;
  marks: readonly RefusalMark[];
}

/**
 * Every host (fresh or stale) whose targets can do (model, workload), with
 * free slots computed per target. Sorted by host name so the result never
 * depends on arrival order. For a `batch` request a target's free slots
 * exclude those it holds back for interactive work (queue/reserve.ts).
 */
export function candidates(inputs: CandidateInputs, model: string, workload: string, batch = false): Candidate[] {
  const out: Candidate[] = [];
  for (const h of inputs.hosts) {
    // A draining host finishes what it holds and takes nothing new (SPEC section 13), this node's own self included.
    if (h.draining) continue;
    const m = h.models.get(model);
    if (!m) continue;
    const targets = eligibleTargets(m, workload);
    if (targets.length === 0) continue;
    const keyed = targets
      .map((t) => ({ t, key: descriptorKey(t.descriptor) }))
      .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    let free = 0;
    let best = keyed[0].key;
    let bestFree = -1;
    let overbooked = 0;
    let releaseMs: number | undefined;
    for (const { t, key } of keyed) {
      let tf: number;
      if (h.local) tf = Math.max(0, t.slots - t.busy);
      else {
        const tally = inputs.forwards(h.name, model, key, h.polledAt, t.yourBusy);
        tf = remoteFree(t, tally);
        overbooked += Math.max(0, tally.deducted - (t.slots - t.busy + Math.min(tally.freed, t.busy)));
      }
      if (batch && t.reserved) tf = Math.max(0, tf - t.reserved);
      free += tf;
      if (tf > bestFree) {
        bestFree = tf;
        best = key;
      }
      if (t.releaseMs !== undefined) releaseMs = Math.min(releaseMs ?? Infinity, t.releaseMs);
    }
    const refused = !h.local && inputs.marks.some((mk) => mk.host === h.name && mk.model === model && mk.workload === workload && mk.at >= h.polledAt);
    out.push({
      host: h.name,
      local: h.local,
      fresh: h.fresh,
      healthy: targets.some((t) => t.slots > 0),
      // A backend starting, or an on-demand model being fetched or loaded there: requests wait for it as for a full one.
      loading: targets.some((t) => (t.loading ?? 0) > 0 || (t.onDemand === true && (t.state === 'loading' || t.state === 'fetching'))),
      // Unloaded, or unloading (a request that arrives as an idle unload ends loads it again once the unload is done).
      available: targets.some((t) => t.onDemand === true && (t.state === 'unloaded' || t.state === 'unloading')),
      free: refused ? 0 : free,
      slots: targets.reduce((n, t) => n + t.slots, 0),
      rttMs: h.rttMs,
      overheadMs: m.overheadMs,
      ratePer1k: m.ratePer1k,
      bestTarget: best,
      ...(releaseMs !== undefined ? { releaseMs } : {}),
      ...(overbooked > 0 ? { ahead: overbooked } : {}),
      ...(refused ? { refused: true as const } : {}),
    });
  }
  return out.sort((a, b) => (a.host < b.host ? -1 : a.host > b.host ? 1 : 0));
}

/**
 * A remote target's free slots: its report's, less this node's forwards the
 * report cannot know of that are still in flight, plus those it shows busy
 * that have ended since — never more than the report showed busy (tallyOf).
 */
function remoteFree(t: TargetView, { deducted, freed }: ForwardTally): number {
  return Math.max(0, t.slots - t.busy - deducted + Math.min(freed, t.busy));
}

/** Does an ended forward free a slot that a report polled at `polledAt` shows busy? */
export const freesSlotOf = (f: ForwardRecord, polledAt: number): boolean => f.endedAt !== undefined && f.startedAt < polledAt && f.endedAt >= polledAt;

/**
 * The tally of `records` for one target against a report polled at `polledAt`, counted one by one. With `yourBusy`
 * (the report says how many of its busy slots this node's forwards held) the report's share of ours is replaced by
 * ours in flight now, whatever the times: a forward that started just before the poll may not have reached the member
 * by then, and one that ended just after it may have freed its slot there before; guessing from the times counts such
 * a slot free twice (a refused forward, and the queue's order lost).
 */
export function tallyOf(records: Iterable<ForwardRecord>, target: string, polledAt: number, yourBusy?: number): ForwardTally {
  let deducted = 0;
  let freed = 0;
  for (const f of records) {
    if (f.target !== target) continue;
    if (f.endedAt === undefined) {
      if (yourBusy !== undefined || f.startedAt >= polledAt) deducted++;
    } else if (yourBusy === undefined && freesSlotOf(f, polledAt)) freed++;
  }
  return yourBusy === undefined ? { deducted, freed } : { deducted, freed: yourBusy };
}

/** Tallies over a plain list of forwards (tests, and callers without a book). */
export function forwardsIn(list: readonly ForwardRecord[]): CandidateInputs['forwards'] {
  return (host, model, target, polledAt, yourBusy) => tallyOf(list.filter((f) => f.host === host && f.model === model), target, polledAt, yourBusy);
}

/** The union of known workloads over a model's targets on the given hosts, sorted (for /v1/models). */
export function modelWorkloads(models: readonly HostModelView[]): string[] {
  const set = new Set<string>();
  for (const m of models) for (const t of m.targets ?? [{ descriptor: LEGACY_DESCRIPTOR } as { descriptor: Descriptor }]) for (const w of t.descriptor.workloads) set.add(w);
  for (const m of models) for (const t of m.targets ?? []) if (t.descriptor.audio && t.descriptor.workloads.includes('chat')) set.add('transcription');
  return [...set].sort();
}
