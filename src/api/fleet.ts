/**
 * The mesh-wide read endpoints: /v1/models (every model in the mesh, the
 * same document on every node for the same mesh state), /v1/fleet/capacity
 * (free slots per model per host) and /v1/mesh (the members).
 */
import type { ApiNode } from './ports.ts';
import { modelWorkloads } from '../route/eligibility.ts';
import type { SlotHold } from '../prompt/held.ts';
import type { HostModelView, HostView } from '../route/types.ts';
import { isKnownWorkload } from '../workloads/workloads.ts';

interface ModelEntry {
  id: string;
  object: 'model';
  created: number;
  owned_by: 'viiwork' | 'alias';
  context_length?: number;
  workloads: string[];
  hosts?: string[];
  target?: string;
  fallbacks?: string[];
}

/** Models of the given hosts (this node and every alive or suspect member with a report, fresh or stale). */
function byModel(hosts: readonly HostView[]): Map<string, { views: HostModelView[]; hosts: string[]; ctx: number[] }> {
  const out = new Map<string, { views: HostModelView[]; hosts: string[]; ctx: number[] }>();
  for (const h of hosts) {
    for (const [name, view] of h.models) {
      let e = out.get(name);
      if (!e) out.set(name, (e = { views: [], hosts: [], ctx: [] }));
      e.views.push(view);
      e.hosts.push(h.name);
      if (view.ctx !== undefined) e.ctx.push(view.ctx);
    }
  }
  return out;
}

export interface AliasListing {
  name: string;
  target: string;
  fallbacks: string[];
}

/**
 * The /v1/models document, pure over the hosts: sorted, and the same for
 * the same mesh state whatever order members, reports or targets arrived in.
 */
export function modelsListing(hosts: readonly HostView[], aliases: readonly AliasListing[] = []): { object: 'list'; data: ModelEntry[] } {
  const models = byModel(hosts);
  const data: ModelEntry[] = [];
  for (const [id, e] of models) {
    data.push({
      id,
      object: 'model',
      created: 0,
      owned_by: 'viiwork',
      ...(e.ctx.length ? { context_length: Math.min(...e.ctx) } : {}),
      workloads: modelWorkloads(e.views).filter(isKnownWorkload),
      hosts: [...e.hosts].sort(),
    });
  }
  for (const a of aliases) {
    if (models.has(a.name)) continue; // a real model name always wins over an alias
    const served = [a.target, ...a.fallbacks].filter((m) => models.has(m));
    const ctx = served.flatMap((m) => models.get(m)!.ctx);
    data.push({
      id: a.name,
      object: 'model',
      created: 0,
      owned_by: 'alias',
      ...(ctx.length ? { context_length: Math.min(...ctx) } : {}),
      workloads: modelWorkloads(served.flatMap((m) => models.get(m)!.views)).filter(isKnownWorkload),
      target: a.target,
      fallbacks: a.fallbacks,
    });
  }
  data.sort((x, y) => (x.id < y.id ? -1 : x.id > y.id ? 1 : 0));
  return { object: 'list', data };
}

export function modelsDocument(node: ApiNode, aliases: readonly AliasListing[] = []) {
  return modelsListing(node.hostViews(), aliases);
}

/** One slot for operators: the tokens of the prompt it holds, those no other slot holds, busy or idle for how long. */
function slotStateOf(s: SlotHold, now: number) {
  return {
    tokens: s.last?.tokens ?? 0,
    unique_tokens: s.unique,
    busy: s.busy,
    ...(s.busy ? {} : { idle_ms: s.idleSince === undefined || !s.last ? null : Math.max(0, Math.round(now - s.idleSince)) }),
  };
}

export function fleetCapacity(node: ApiNode) {
  const now = node.now();
  const hosts = node.hostViews();
  const byModel = new Map<string, unknown[]>();
  for (const h of hosts) {
    for (const [name, m] of h.models) {
      const targets = (m.targets ?? []).map((t) => ({
        workloads: t.descriptor.workloads,
        audio: t.descriptor.audio,
        slots: t.slots,
        busy: t.busy,
        free: Math.max(0, t.slots - t.busy),
        ...(t.state !== undefined ? { state: t.state, memory: t.memory, on_demand: t.onDemand === true } : {}),
        // What each engine slot holds (SPEC 7, "Slot state"; issue 25): the dashboards' slot view.
        ...(t.digest?.slots?.length ? { slot_state: t.digest.slots.map((s) => slotStateOf(s, now)) } : {}),
      }));
      // The model's lifecycle state on this host (SPEC section 11): the most advanced of its targets'.
      const states = (m.targets ?? []).map((t) => t.state).filter((x) => x !== undefined);
      const state = (['loaded', 'loading', 'fetching', 'unloading', 'unloaded'] as const).find((x) => states.includes(x));
      // A model bigger than one host (SPEC section 11): which member holds which part while it runs split there.
      const parts = (m.targets ?? []).find((t) => t.split?.parts)?.split?.parts;
      const list = byModel.get(name) ?? [];
      list.push({
        node: h.name,
        local: h.local,
        fresh: h.fresh,
        report_age_ms: Math.max(0, now - h.polledAt),
        // SPEC section 13: the host finishes what it holds and takes nothing new.
        ...(h.draining ? { draining: true } : {}),
        slots: m.slots,
        busy: m.busy,
        free: Math.max(0, m.slots - m.busy),
        ...(h.local ? { queued: node.queues.depth(name) } : m.queued !== undefined ? { queued: m.queued } : {}),
        ...(m.overheadMs !== undefined ? { ttft_overhead_ms: m.overheadMs } : {}),
        ...(m.ratePer1k !== undefined ? { prefill_ms_per_1k: m.ratePer1k } : {}),
        ...(m.perfSamples !== undefined ? { perf_samples: m.perfSamples } : {}),
        ...(m.targets ? { targets } : { targets: null }),
        ...(state ? { state } : {}),
        ...(parts ? { split: parts.map((p) => ({ member: p.member, bytes: p.bytes })) } : {}),
        // SPEC section 11: the host has the model's file (false: it would fetch it from a member first).
        ...(m.hasFile !== undefined ? { has_file: m.hasFile } : {}),
        // Its size and hash (members that publish the same hash can send it), and a fetch in progress here.
        ...(m.file ? { file: { size: m.file.size, sha256: m.file.sha256 } } : {}),
        ...(m.fetchProgress ? { fetch: { bytes: m.fetchProgress.bytes, size: m.fetchProgress.size } } : {}),
      });
      byModel.set(name, list);
    }
  }
  return {
    node: node.name,
    at: now,
    models: [...byModel.keys()].sort().map((name) => ({ name, hosts: byModel.get(name) })),
    // Each host's memory budget and use in bytes (SPEC section 11), where its report carries them.
    // A host that lends memory (node.lend_memory) says to whom, for which model (SPEC section 11).
    memory: hosts.filter((h) => h.memory).map((h) => ({ node: h.name, ...h.memory!, ...(h.lends ? { lends: true, lent_to: h.lentTo ?? [] } : {}) })),
  };
}

export function meshDocument(node: ApiNode) {
  return {
    node: node.name,
    mode: node.meshMode.mode,
    members: node.members.list().map((m) => ({
      name: m.name,
      state: m.state,
      role: m.role,
      gossip: m.gossip,
      api: m.api ?? null,
      version: m.version ?? null,
      since: new Date(m.since).toISOString(),
      self: m.self,
    })),
  };
}
