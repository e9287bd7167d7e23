/**
 * A request's timeline (SPEC section 10): from the marks its Trace
 * collected, arrival, queue wait, the routing decision (the candidates and
 * their prices), the forward, the executor's slot wait, prefill to the
 * first token, decode and end. Each node keeps the last requests it
 * recorded by timeline id (`<entry>:<n>`, the entry's name and its number
 * for the request); a forward's executor keeps its part under the same id
 * (the `req` claim), and the entry's document joins it (api/timeline.ts).
 */
import { price } from '../route/price.ts';
import type { DecisionRecord } from './decisions.ts';
import type { Trace } from './trace.ts';

export type PhaseName = 'queue' | 'forward' | 'slot' | 'prefill' | 'decode';

export interface Phase {
  name: PhaseName;
  node: string;
  /** ms after the request reached its entry node. */
  from_ms: number;
  to_ms: number;
}

export interface CandidateLine {
  host: string;
  local: boolean;
  free: number;
  cached: number | null;
  overhead_ms: number | null;
  prefill_ms_per_1k: number | null;
  release_ms: number | null;
  rtt_ms: number;
  /** The price routing put on the host: expected wait, service (overhead + uncached prefill + RTT) and their ranking score, ms; null when nothing was priced. */
  wait_ms: number | null;
  service_ms: number | null;
  /** Of service_ms, the expected re-prefill of what its slot would destroy there (SPEC 9.6, "Eviction"); null when nothing was priced. */
  evict_ms: number | null;
  score: number | null;
  chosen: boolean;
}

export interface TimelineDoc {
  id: string;
  /** The node whose record this is. */
  node: string;
  entry: string;
  executor: string | null;
  model: string;
  workload: string;
  route: string;
  outcome: string;
  /** Unix ms when the request reached this node. */
  at: number;
  total_ms: number;
  first_token_ms: number | null;
  phases: Phase[];
  decision?: { reason: string; candidates: CandidateLine[] };
  /** The executor's part, joined across the hop (a forward's entry only): its phases are in `phases` too. */
  executor_part?: { node: string; joined: true; offset_ms: number } | { node: string; joined: false; error: string };
}

const NAME_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}:\d{1,15}$/;

/** Is `id` a timeline id of entry `from` (a member may only name its own requests)? */
export function isTimelineOf(id: string, from: string): boolean {
  return NAME_ID.test(id) && id.slice(0, id.lastIndexOf(':')) === from;
}

export function isTimelineId(id: string): boolean {
  return NAME_ID.test(id);
}

interface Kept {
  record: DecisionRecord;
  trace: Trace;
  tokens?: number;
}

export class TimelineBook {
  readonly #kept = new Map<string, Kept>();

  constructor(
    readonly self: string,
    private readonly size = 200,
  ) {}

  /** A request ended (its feed record was just added); `tokens`: the prompt tokens routing priced. */
  add(record: DecisionRecord, trace: Trace, tokens?: number): void {
    const id = record.timeline;
    if (id === undefined) return;
    this.#kept.delete(id);
    this.#kept.set(id, { record, trace, tokens });
    if (this.#kept.size > this.size) this.#kept.delete(this.#kept.keys().next().value!);
  }

  /** This node's document of a timeline, or undefined when it has none (never had, or forgotten). */
  get(id: string): TimelineDoc | undefined {
    const k = this.#kept.get(id);
    return k && timelineDoc(this.self, k.record, k.trace, k.tokens);
  }
}

const ms = (x: number) => Math.round(x * 10) / 10;

/** The document of one record: its marks as phases from the request's arrival here. */
export function timelineDoc(node: string, record: DecisionRecord, t: Trace, tokens?: number): TimelineDoc {
  const t0 = t.startedAt;
  const end = t.endedAt ?? t0;
  const at = (x: number) => ms(x - t0);
  const phases: Phase[] = [];
  const add = (name: PhaseName, from: number | undefined, to: number | undefined) => {
    if (from !== undefined && to !== undefined && to >= from) phases.push({ name, node, from_ms: at(from), to_ms: at(to) });
  };
  if (t.placedAt !== undefined && t.queuedMs > 0) add('queue', t0, t.placedAt);
  if (t.forwardAt !== undefined) add('forward', t.forwardAt, end);
  else {
    // Run here: the slot wait (an entry's after its placement, a forward's from its arrival), the engine's prefill to the first token, decode.
    add('slot', t.placedAt ?? t0, t.grantedAt);
    // A whole answer has no first chunk: the engine's own prompt time ends its prefill when it reports one.
    const first = t.firstContentAt ?? t.prefilledAt;
    add('prefill', t.engineAt, first ?? end);
    if (first !== undefined) add('decode', first, end);
  }
  const doc: TimelineDoc = {
    id: record.timeline!,
    node,
    entry: record.entry,
    executor: record.executor,
    model: record.model,
    workload: record.workload,
    route: record.route,
    outcome: record.outcome,
    at: Math.round(record.at - (end - t0)),
    total_ms: at(end),
    first_token_ms: t.firstContentAt === undefined ? null : at(t.firstContentAt),
    phases,
  };
  if (t.cands) doc.decision = { reason: record.route, candidates: candidateLines(t.cands, record.executor, tokens) };
  return doc;
}

function candidateLines(cands: NonNullable<Trace['cands']>, chosen: string | null, tokens?: number): CandidateLine[] {
  const priced = tokens !== undefined ? price(cands, tokens) : undefined;
  return cands.map((c, i) => {
    const p = priced?.[i];
    return {
      host: c.host,
      local: c.local,
      free: c.free,
      cached: c.cached ?? null,
      overhead_ms: c.overheadMs ?? null,
      prefill_ms_per_1k: c.ratePer1k ?? null,
      release_ms: c.releaseMs ?? null,
      rtt_ms: ms(c.rttMs),
      wait_ms: p ? ms(p.wait) : null,
      service_ms: p ? ms(p.service) : null,
      evict_ms: p ? ms(p.evictMs) : null,
      score: p ? ms(p.score) : null,
      chosen: c.host === chosen,
    };
  });
}

/** The entry's document with its executor's part: the executor's phases placed from the moment the forward was sent. */
export function joinExecutor(entry: TimelineDoc, part: TimelineDoc | { error: string }, executor: string): TimelineDoc {
  if ('error' in part) return { ...entry, executor_part: { node: executor, joined: false, error: part.error } };
  const forward = entry.phases.find((p) => p.name === 'forward');
  const offset = forward?.from_ms ?? 0;
  const shifted = part.phases.map((p) => ({ ...p, from_ms: ms(p.from_ms + offset), to_ms: ms(p.to_ms + offset) }));
  return { ...entry, phases: [...entry.phases, ...shifted], executor_part: { node: executor, joined: true, offset_ms: offset } };
}
