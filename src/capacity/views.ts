/**
 * The routing snapshot of this moment: this node's targets as they are now,
 * and each peer's from its last report. Built fresh for every decision.
 */
import { digestKey, type CapacityPoller, type PeerReport } from './poller.ts';
import type { FetchProgress, ModelFile } from './report.ts';
import type { CacheBook } from '../engines/cache-book.ts';
import type { SlotTable } from '../engines/targets.ts';
import type { Lifecycle } from '../lifecycle/lifecycle.ts';
import type { MemberInfo } from '../mesh/members.ts';
import type { PerfScores } from '../perf/scores.ts';
import type { HostModelView, HostView, TargetView } from '../route/types.ts';
import type { ReserveBook } from '../queue/reserve.ts';
import { curveChance, type ReturnChance } from '../route/slots.ts';

/** Routing may use this node's own scores up to this old (recomputing them on every request costs more than it is worth). */
export const ROUTING_SCORE_MAX_AGE_MS = 250;

/** What the local view reads of this node's model files (files/model-files.ts). */
export interface LocalFiles {
  fileOf(model: string): ModelFile | undefined;
  fetchOf(model: string): FetchProgress | undefined;
  hasFile(model: string): boolean | undefined;
}

export function localView(
  name: string,
  slots: SlotTable,
  perf: PerfScores,
  now: number,
  cache?: CacheBook,
  lifecycle?: Pick<Lifecycle, 'targetState' | 'memory'>,
  files?: LocalFiles,
  reserve?: Pick<ReserveBook, 'held'>,
): HostView {
  const models = new Map<string, HostModelView>();
  for (const model of slots.models()) {
    const local = slots.targetsOf(model);
    // Built on every routing decision: one object per target, filled in place (no spreads).
    const targets: TargetView[] = [];
    let ctx = Infinity;
    let slotCount = 0;
    let busy = 0;
    for (const t of local) {
      // The entry prices this node with its own exact record of what it sent its engines.
      const s: TargetView = slots.summarize(t);
      s.digest = cache?.routingDigest(t);
      s.releaseMs = slots.releaseMs(t);
      const held = reserve ? Math.min(reserve.held(model, s.slots), Math.max(0, s.slots - s.busy)) : 0;
      if (held > 0) s.reserved = held;
      const life = lifecycle?.targetState(t.backends);
      if (life) {
        s.state = life.state;
        s.memory = life.memory;
        s.onDemand = life.onDemand;
        s.loadError = life.error;
        if (life.split) s.split = { lenders: life.split.allowed, ...(life.split.parts ? { parts: life.split.parts } : {}) };
      }
      targets.push(s);
      slotCount += s.slots;
      busy += s.busy;
      for (const b of t.backends) ctx = Math.min(ctx, b.context);
    }
    const p = perf.published(model, ROUTING_SCORE_MAX_AGE_MS);
    models.set(model, {
      ctx,
      targets,
      slots: slotCount,
      busy,
      overheadMs: p.ttft_overhead_ms,
      ratePer1k: p.prefill_ms_per_1k,
      perfSamples: p.perf_samples,
      ...filesOf(model, files),
    });
  }
  return { name, local: true, rttMs: 0, fresh: true, polledAt: now, models, ...(lifecycle ? { memory: lifecycle.memory() } : {}) };
}

function filesOf(model: string, files?: LocalFiles): Partial<HostModelView> {
  if (!files) return {};
  const file = files.fileOf(model);
  const progress = files.fetchOf(model);
  // A model without a file (sim, openai) has no hasFile at all: "not here" would be untrue of it.
  const has = files.hasFile(model);
  return { ...(has !== undefined ? { hasFile: has } : {}), ...(file ? { file } : {}), ...(progress ? { fetchProgress: progress } : {}) };
}

/** A report's gap curve as a chance function, built once per report. */
const chanceCache = new WeakMap<PeerReport, ReturnChance>();

function chanceOf(r: PeerReport): ReturnChance | undefined {
  const curve = r.report.turn_gaps;
  if (!curve) return undefined;
  let f = chanceCache.get(r);
  if (!f) chanceCache.set(r, (f = (idleMs, turns) => curveChance(idleMs, curve, turns)));
  return f;
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
        ...(t.your_busy !== undefined ? { yourBusy: t.your_busy } : {}),
        loading: t.loading,
        digest: r.digests?.get(digestKey(mr.name, t.workloads, t.audio)),
        releaseMs: t.release_ms,
        ...(t.reserved ? { reserved: t.reserved } : {}),
        ...(t.state !== undefined ? { state: t.state, memory: t.memory, onDemand: t.load === 'on_demand', loadError: t.load_error } : {}),
        ...(t.split ? { split: t.split } : {}),
      })),
      slots: mr.slots,
      busy: mr.busy,
      healthyBackends: mr.healthy_backends,
      ctx: mr.ctx,
      queued: mr.queued,
      perfSamples: mr.perf_samples,
      overheadMs: mr.ttft_overhead_ms,
      ratePer1k: mr.prefill_ms_per_1k,
      // An older node's report has no has_file: then only a published file says the model has one here.
      ...(mr.has_file !== undefined ? { hasFile: mr.has_file } : mr.file !== undefined ? { hasFile: true } : {}),
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
    const returnChance = chanceOf(r);
    out.push({
      name: m.name,
      local: false,
      rttMs: poller.rtt(m.name) ?? 0,
      fresh: m.state === 'alive' && now - r.polledAt <= staleAfterMs,
      polledAt: r.polledAt,
      models,
      ...(r.report.memory ? { memory: r.report.memory } : {}),
      ...(r.report.draining ? { draining: true } : {}),
      ...(r.report.lending ? { lends: true, lentTo: r.report.lending.lends } : {}),
      ...(returnChance ? { returnChance } : {}),
    });
  }
  return out;
}
