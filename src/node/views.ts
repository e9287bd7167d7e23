/**
 * The routing snapshot of this moment: this node's targets as they are now,
 * and each peer's from its last report. Built fresh for every decision.
 */
import { digestKey, type CapacityPoller, type PeerReport } from '../capacity/poller.ts';
import type { FetchProgress, ModelFile } from '../capacity/report.ts';
import type { CacheBook } from '../engines/cache-book.ts';
import type { SlotTable } from '../engines/targets.ts';
import type { Lifecycle } from '../lifecycle/lifecycle.ts';
import type { MemberInfo } from '../mesh/members.ts';
import type { PerfScores } from '../perf/scores.ts';
import type { HostModelView, HostView } from '../route/types.ts';

/** Routing may use this node's own scores up to this old (recomputing them on every request costs more than it is worth). */
export const ROUTING_SCORE_MAX_AGE_MS = 250;

export function localView(name: string, slots: SlotTable, perf: PerfScores, now: number, cache?: CacheBook, lifecycle?: Pick<Lifecycle, 'targetState' | 'memory'>, fileOf?: (model: string) => ModelFile | undefined, fetchOf?: (model: string) => FetchProgress | undefined): HostView {
  const models = new Map<string, HostModelView>();
  for (const model of slots.models()) {
    const local = slots.targetsOf(model);
    const targets = local.map((t) => {
      // The entry prices this node with its own exact record of what it sent its engines.
      const s = { ...slots.summarize(t), digest: cache?.digest(t), releaseMs: slots.releaseMs(t) };
      const life = lifecycle?.targetState(t.backends);
      return life ? { ...s, state: life.state, memory: life.memory, onDemand: life.onDemand, loadError: life.error } : s;
    });
    const p = perf.published(model, ROUTING_SCORE_MAX_AGE_MS);
    models.set(model, {
      ctx: Math.min(...local.flatMap((t) => t.backends.map((b) => b.info.context))),
      targets,
      slots: targets.reduce((n, t) => n + t.slots, 0),
      busy: targets.reduce((n, t) => n + t.busy, 0),
      overheadMs: p.ttft_overhead_ms,
      ratePer1k: p.prefill_ms_per_1k,
      perfSamples: p.perf_samples,
      ...filesOf(model, fileOf, fetchOf),
    });
  }
  return { name, local: true, rttMs: 0, fresh: true, polledAt: now, models, ...(lifecycle ? { memory: lifecycle.memory() } : {}) };
}

function filesOf(model: string, fileOf?: (model: string) => ModelFile | undefined, fetchOf?: (model: string) => FetchProgress | undefined): Partial<HostModelView> {
  if (!fileOf) return {};
  const file = fileOf(model);
  const progress = fetchOf?.(model);
  return { hasFile: file !== undefined, ...(file ? { file } : {}), ...(progress ? { fetchProgress: progress } : {}) };
}

/** A report's models as routing reads them, built once per report (not once per request). */
const viewCache = new WeakMap<PeerReport, ReadonlyMap<string, HostModelView>>();

function modelsOf(r: PeerReport): ReadonlyMap<string, HostModelView> {
  const cached = viewCache.get(r);
  if (cached) return cached;
  const models = new Map<string, HostModelView>();
  for (const mr of r.report.models) {
    models.set(mr.name, {
      targets: mr.targets?.map((t) => ({
        descriptor: { workloads: t.workloads, audio: t.audio },
        slots: t.slots,
        busy: t.busy,
        loading: t.loading,
        digest: r.digests?.get(digestKey(mr.name, t.workloads, t.audio)),
        releaseMs: t.release_ms,
        ...(t.state !== undefined ? { state: t.state, memory: t.memory, onDemand: t.load === 'on_demand', loadError: t.load_error } : {}),
      })),
      slots: mr.slots,
      busy: mr.busy,
      healthyBackends: mr.healthy_backends,
      ctx: mr.ctx,
      queued: mr.queued,
      perfSamples: mr.perf_samples,
      overheadMs: mr.ttft_overhead_ms,
      ratePer1k: mr.prefill_ms_per_1k,
      hasFile: mr.file !== undefined,
      ...(mr.file ? { file: mr.file } : {}),
      ...(mr.fetch ? { fetchProgress: mr.fetch } : {}),
    });
  }
  viewCache.set(r, models);
  return models;
}

export function peerViews(peers: readonly MemberInfo[], poller: CapacityPoller | undefined, staleAfterMs: number, now: number): HostView[] {
  if (!poller) return [];
  const out: HostView[] = [];
  for (const m of peers) {
    const r = poller.get(m.name);
    if (!r) continue;
    const models = modelsOf(r);
    out.push({
      name: m.name,
      local: false,
      rttMs: poller.rtt(m.name) ?? 0,
      fresh: m.state === 'alive' && now - r.polledAt <= staleAfterMs,
      polledAt: r.polledAt,
      models,
      ...(r.report.memory ? { memory: r.report.memory } : {}),
    });
  }
  return out;
}

/** Alive viiwork members (this node included, at `own`) whose reports show alias_version ≥ `version`, of how many. */
export function aliasReach(version: number, own: number, peers: readonly MemberInfo[], poller: Pick<CapacityPoller, 'get'> | undefined): { reached: number; members: number } {
  let reached = own >= version ? 1 : 0;
  let members = 1;
  for (const m of peers) {
    if (m.state !== 'alive') continue;
    members++;
    const v = poller?.get(m.name)?.report.alias_version;
    if (v !== undefined && v >= version) reached++;
  }
  return { reached, members };
}
