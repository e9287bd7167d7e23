/** This node's own /v1/capacity document (SPEC section 7). */
import type { SlotTable } from '../engines/targets.ts';
import type { PerfScores } from '../perf/scores.ts';

/** What the report is made of. */
export interface ReportSource {
  readonly name: string;
  readonly version: string;
  now(): number;
  readonly slots: SlotTable;
  readonly perf: PerfScores;
  /** Requests waiting in this node's queues for a model. */
  queued(model: string): number;
  readonly aliasVersion: number;
}

export interface TargetReport {
  workloads: string[];
  audio: boolean;
  slots: number;
  busy: number;
  /** Backends still loading (added later: absent means unknown, read as 0). */
  loading?: number;
}

export interface ModelReport {
  name: string;
  engine?: string;
  slots: number;
  busy: number;
  queued?: number;
  ctx?: number;
  backends?: number;
  healthy_backends?: number;
  ttft_overhead_ms?: number;
  prefill_ms_per_1k?: number;
  perf_samples?: number;
  /** Absent on an older node: then chat and completion only. */
  targets?: TargetReport[];
}

export interface CapacityReport {
  node: string;
  ver?: string;
  at?: number;
  alias_version?: number;
  models: ModelReport[];
}

export function buildReport(node: ReportSource): CapacityReport {
  const models: ModelReport[] = [];
  for (const name of node.slots.models()) {
    const targets = node.slots.targetsOf(name);
    const backends = targets.flatMap((t) => t.backends);
    const tr = targets.map((t) => {
      const s = node.slots.summarize(t);
      return { workloads: [...t.descriptor.workloads], audio: t.descriptor.audio, slots: s.slots, busy: s.busy, loading: s.loading } satisfies TargetReport;
    });
    const perf = node.perf.published(name);
    const engines = [...new Set(backends.map((b) => b.info.engine))];
    models.push({
      name,
      engine: engines.join(','),
      slots: tr.reduce((n, t) => n + t.slots, 0),
      busy: tr.reduce((n, t) => n + t.busy, 0),
      queued: node.queued(name),
      ctx: Math.min(...backends.map((b) => b.info.context)),
      backends: backends.length,
      healthy_backends: backends.filter((b) => b.state === 'healthy').length,
      ...(perf.ttft_overhead_ms !== undefined ? { ttft_overhead_ms: perf.ttft_overhead_ms } : {}),
      ...(perf.prefill_ms_per_1k !== undefined ? { prefill_ms_per_1k: perf.prefill_ms_per_1k } : {}),
      perf_samples: perf.perf_samples,
      targets: tr,
    });
  }
  return { node: node.name, ver: node.version, at: node.now(), alias_version: node.aliasVersion, models };
}

