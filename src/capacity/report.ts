/** This node's own /v1/capacity document (SPEC section 7). */
import type { CacheBook } from '../engines/cache-book.ts';
import type { SlotTable } from '../engines/targets.ts';
import type { LifeState, Lifecycle, MemoryFigures } from '../lifecycle/lifecycle.ts';
import type { KeyTable } from '../keys/table.ts';
import type { PerfScores } from '../perf/scores.ts';
import type { GapCurve } from '../route/slots.ts';
import { DIGEST_MAX_BYTES, encodeDigest, encodeSlots, RAM_WIRE_BYTES, SLOT_WIRE_BYTES, type DigestWire, type HeldDigests } from './digest.ts';

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
  /** The key table (SPEC section 12): its version and digest are reported once it has entries. */
  readonly keys?: Pick<KeyTable, 'empty' | 'version' | 'digest'>;
  /** The executor's record of its engines' caches (absent: no digests). */
  readonly cache?: CacheBook;
  /** The gaps between turns its slots saw, as its slot choice reads them (route/slots.ts TurnGaps). */
  turnGaps?(): GapCurve;
  /** Slots of a target of `model` with `slots` healthy slots held back from batch now (queue/reserve.ts); absent: none. */
  heldBack?(model: string, slots: number): number;
  /** Model lifecycle (SPEC section 11): target states and memory, the node's budget. */
  readonly lifecycle?: Pick<Lifecycle, 'targetState' | 'memory'>;
  /** The model's file here, once hashed (SPEC section 11: members fetch it by this hash). */
  fileOf?(model: string): ModelFile | undefined;
  /** Whether the model's file is here and hashed (undefined: it has no file at all, e.g. sim and openai engines). */
  hasFile?(model: string): boolean | undefined;
  /** The model's file fetch in progress here (SPEC section 11, state `fetching`). */
  fetchOf?(model: string): FetchProgress | undefined;
  /** The node is draining (SPEC section 13). */
  readonly draining?: boolean;
  /** What it lends (node.lend_memory: true), else undefined (SPEC section 11, a model bigger than one host). */
  lending?(): LendingReport | undefined;
}

/** Memory a node lends to members running a model bigger than one host (present only where node.lend_memory is true). */
export interface LendingReport {
  /** Bytes lent now (counted in memory.used). */
  lent: number;
  lends: { to: string; model: string; bytes: number }[];
}

export interface TargetReport {
  workloads: string[];
  audio: boolean;
  slots: number;
  busy: number;
  /**
   * Of `busy`, the slots the polling member's own forwards hold (docs/api.md): only in a report to a member, recognised
   * by its address; absent: unknown (a client's poll, or an older node).
   */
  your_busy?: number;
  /** Backends still loading (added later: absent means unknown, read as 0). */
  loading?: number;
  /** With no free slot: the expected ms until one frees (SPEC section 7). */
  release_ms?: number;
  /** Free slots held back from batch requests while interactive work is recent (docs/api.md); absent: none. */
  reserved?: number;
  /** What the target's engines are believed to hold (capacity/digest.ts; docs/api.md). */
  digest?: DigestWire;
  /** SPEC section 11: unloaded, fetching, loading, loaded, unloading (absent: an older node, loaded). */
  state?: LifeState;
  /** Bytes one copy of this target needs (SPEC section 11). */
  memory?: number;
  /** `on_demand`: this node may load and unload it (absent: always). */
  load?: 'on_demand';
  /** The engine's text of the last failed load, while it is unloaded. */
  load_error?: string;
  /**
   * A model bigger than one host (SPEC section 11): who may lend to it (`auto`, or the members named), and while it
   * runs split, which member holds which part (bytes; the runner's own first). Absent: not a split entry.
   */
  split?: { lenders: 'auto' | string[]; parts?: { member: string; bytes: number }[] };
}

/** A model file a member can fetch from this node: GET /v1/files/{sha256}. */
export interface ModelFile {
  size: number;
  sha256: string;
}

/** A fetch of a model's file in progress: bytes verified-and-written so far of its size. */
export interface FetchProgress {
  bytes: number;
  size: number;
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
  /** The model's file on this node (absent: no file, not yet hashed, or an older node). */
  file?: ModelFile;
  /** While the model's file is being fetched here (absent otherwise, or an older node). */
  fetch?: FetchProgress;
  /** The model's file is here (false: it would fetch it from a member first); absent: it has no file (sim, openai), or an older node. */
  has_file?: boolean;
}

export interface CapacityReport {
  node: string;
  ver?: string;
  at?: number;
  alias_version?: number;
  key_version?: number;
  /** 16 hex digits over the key table's entries: two members with the same one hold the same keys (keys/sync.ts). */
  key_digest?: string;
  /** The executor's digest epoch and node-wide version: a poll says `?digests=<epoch>.<version>` to be sent only what changed. */
  digest_epoch?: string;
  digest_version?: number;
  /**
   * The gaps between conversations' turns this node's slots saw (route/slots.ts GapCurve): whether it takes an idle
   * slot's conversation for live, so an entry prices its slots as it will choose them (SPEC 9.6). Absent: an older node.
   */
  turn_gaps?: GapCurve;
  models: ModelReport[];
  /** Bytes: the budget, what backends loading, loaded or unloading use, and what is free (SPEC section 11). */
  memory?: MemoryFigures;
  /** While the node drains (SPEC section 13): entries send it no new work. Absent: not draining. */
  draining?: true;
  /** This node lends memory (node.lend_memory: true) and to whom; absent: it does not lend. */
  lending?: LendingReport;
}

/** A target's wire digest, encoded once per version (a report per poll must not re-encode an unchanged digest). */
const wireCache = new WeakMap<object, DigestWire>();

/**
 * `held`: what the poller says it holds; targets unchanged since are sent as `{"v": version}` alone. `member`: the
 * member polling, told its own share of each target's busy slots.
 */
export function buildReport(node: ReportSource, held?: HeldDigests, member?: string): CapacityReport {
  const book = node.cache;
  const since = book && held && held.epoch === book.epoch ? held.version : -1;
  const models: ModelReport[] = [];
  for (const name of node.slots.models()) {
    const targets = node.slots.targetsOf(name);
    const backends = targets.flatMap((t) => t.backends);
    const tr = targets.map((t) => {
      const s = node.slots.summarize(t);
      const r: TargetReport = { workloads: [...t.descriptor.workloads], audio: t.descriptor.audio, slots: s.slots, busy: s.busy, loading: s.loading };
      if (member !== undefined) r.your_busy = Math.min(s.busy, node.slots.busyOfMember(t, member));
      const release = node.slots.releaseMs(t);
      if (release !== undefined) r.release_ms = release;
      const held = node.heldBack?.(name, s.slots) ?? 0;
      if (held > 0) r.reserved = held;
      const d = book?.digest(t);
      if (d) {
        if (d.version <= since) r.digest = { v: d.version };
        else {
          let w = wireCache.get(d);
          // The slots' idle times move with the clock: encoded per report, their room taken off the links'.
          if (!w) {
            const ramRoom = d.ramLinks ? RAM_WIRE_BYTES : 0;
            w = encodeDigest(d.version, d.links, DIGEST_MAX_BYTES - SLOT_WIRE_BYTES * (d.slots?.length ?? 0) - ramRoom);
            // The RAM pool's links, packed the same way (the leading `{"v":…,"links":` of its own encoding dropped).
            if (d.ramLinks) w = { ...w, ram: encodeDigest(d.version, d.ramLinks, ramRoom).links };
            wireCache.set(d, w);
          }
          r.digest = d.slots?.length ? { ...w, slots: encodeSlots(d.slots, node.now()) } : w;
        }
      }
      const life = node.lifecycle?.targetState(t.backends);
      if (life) {
        r.state = life.state;
        r.memory = life.memory;
        if (life.onDemand) r.load = 'on_demand';
        if (life.error) r.load_error = life.error.slice(0, 1024);
        if (life.split) r.split = { lenders: life.split.allowed === 'auto' ? 'auto' : [...life.split.allowed], ...(life.split.parts ? { parts: life.split.parts.map((p) => ({ ...p })) } : {}) };
      }
      return r;
    });
    const perf = node.perf.published(name);
    const file = node.fileOf?.(name);
    const fetch = node.fetchOf?.(name);
    const hasFile = node.hasFile?.(name);
    const engines = [...new Set(backends.map((b) => b.info.engine))];
    models.push({
      name,
      engine: engines.join(','),
      slots: tr.reduce((n, t) => n + t.slots, 0),
      busy: tr.reduce((n, t) => n + t.busy, 0),
      queued: node.queued(name),
      ctx: Math.min(...backends.map((b) => b.context)),
      backends: backends.length,
      healthy_backends: backends.filter((b) => b.state === 'healthy').length,
      ...(perf.ttft_overhead_ms !== undefined ? { ttft_overhead_ms: perf.ttft_overhead_ms } : {}),
      ...(perf.prefill_ms_per_1k !== undefined ? { prefill_ms_per_1k: perf.prefill_ms_per_1k } : {}),
      perf_samples: perf.perf_samples,
      targets: tr,
      ...(file ? { file: { size: file.size, sha256: file.sha256 } } : {}),
      ...(fetch ? { fetch: { bytes: fetch.bytes, size: fetch.size } } : {}),
      ...(hasFile !== undefined ? { has_file: hasFile } : {}),
    });
  }
  const digests = book ? { digest_epoch: book.epoch, digest_version: book.version } : {};
  const gaps = node.turnGaps ? { turn_gaps: node.turnGaps() } : {};
  return { node: node.name, ver: node.version, at: node.now(), alias_version: node.aliasVersion, ...keyFields(node.keys), ...digests, ...gaps, models, ...(node.lifecycle ? { memory: node.lifecycle.memory() } : {}), ...(node.draining ? { draining: true } : {}), ...lendingOf(node) };
}

function lendingOf(node: ReportSource): { lending?: LendingReport } {
  const l = node.lending?.();
  return l ? { lending: l } : {};
}

/** Only once the mesh has keys: a report without them is what it was before keys, which an older member reads. */
function keyFields(keys: ReportSource['keys']): { key_version?: number; key_digest?: string } {
  return keys && !keys.empty ? { key_version: keys.version, key_digest: keys.digest } : {};
}
