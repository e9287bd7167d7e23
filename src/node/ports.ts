/**
 * The ports this node hands the rooms that ask the most of it: the
 * dispatcher's (dispatch/ports.ts), the capacity report's source
 * (capacity/report.ts), on-demand loads' (dispatch/entry/load.ts), the poll
 * interest's (capacity/interest.ts) and the history's sources
 * (history/node-history.ts), built from the node's parts. Wiring only.
 */
import type { Keyring } from '../keys/access.ts';
import type { AliasTable } from '../aliases/table.ts';
import type { InterestPorts } from '../capacity/interest.ts';
import type { ReportSource } from '../capacity/report.ts';
import { refreshStale } from '../capacity/poll-targets.ts';
import type { CapacityPoller } from '../capacity/poller.ts';
import type { MemberTable } from '../mesh/members.ts';
import type { Config } from '../config/schema.ts';
import type { DecisionFeed } from '../dispatch/decisions.ts';
import type { LoadPorts, Loads } from '../dispatch/entry/load.ts';
import type { DispatchPorts, ServedUsage } from '../dispatch/ports.ts';
import type { Reservation, RoutedRequest } from '../dispatch/types.ts';
import type { Backend } from '../engines/backend.ts';
import type { CacheBook } from '../engines/cache-book.ts';
import type { CacheMover } from '../files/cache-move.ts';
import type { TurnGaps } from '../route/slots.ts';
import type { Lease, SlotTable } from '../engines/targets.ts';
import type { SlotGate } from '../queue/gate.ts';
import type { Workload } from '../workloads/workloads.ts';
import { tokenizerFor } from '../engines/tokenize.ts';
import type { ModelFilePolicy } from '../files/model-files.ts';
import type { ForwardBook } from '../forward/book.ts';
import type { PeerLink } from '../forward/send.ts';
import { localLoadAsk } from '../lifecycle/answers.ts';
import type { LoadAnswer, LoadReason, Lifecycle } from '../lifecycle/lifecycle.ts';
import { askMemberLoad } from '../forward/lifecycle-ask.ts';
import type { Log } from '../log.ts';
import type { Metrics } from '../metrics/metrics.ts';
import type { PerfScores } from '../perf/scores.ts';
import type { QueueSet } from '../queue/fifo.ts';
import type { LendBook } from '../split/lends.ts';
import type { HostView } from '../route/types.ts';
import type { HistorySources, NodeHistory } from '../history/node-history.ts';
import type { TimelineBook } from '../dispatch/timeline.ts';
import type { Tracing } from '../telemetry/tracing.ts';
import type { ReserveBook } from '../queue/reserve.ts';

/** The node's parts the dispatcher reads (ViiworkNode has them all). */
export interface DispatchParts {
  readonly name: string;
  /** Slot caches moved between members (files/cache-move.ts). */
  readonly moves: CacheMover;
  readonly config: Config;
  readonly now: () => number;
  readonly slots: SlotTable;
  readonly gate: SlotGate<Workload, Lease>;
  readonly forwards: ForwardBook;
  readonly queues: QueueSet<Reservation>;
  readonly aliases: AliasTable;
  readonly perf: PerfScores;
  readonly metrics: Metrics;
  readonly decisions: DecisionFeed;
  readonly log: Log;
  readonly cacheBook: CacheBook;
  /** The gaps between conversations' turns this node's slots saw (route/slots.ts): how long an idle conversation stays live. */
  readonly turnGaps: TurnGaps;
  readonly loads: Loads;
  readonly backends: readonly Backend[];
  readonly warming: Promise<void> | undefined;
  readonly members: MemberTable;
  /** Once the mesh is up. */
  readonly poller: CapacityPoller | undefined;
  readonly history: NodeHistory;
  readonly timelines: TimelineBook;
  readonly tracing: Tracing | undefined;
  hostViews(): HostView[];
  /** A local run ended with the engine's answer (dispatch/ports.ts). */
  served(rr: RoutedRequest, used: ServedUsage): void;
  /** When this node began draining; undefined: it is not (survive/drain.ts). */
  readonly drainingSince: number | undefined;
}

/** What the dispatcher may use of this node; `peers` calls members, `waiting` hurries them (capacity/interest.ts). */
export function dispatchPorts(n: DispatchParts, peers: PeerLink, waiting: () => void): DispatchPorts {
  // routing.* and api.* need a restart to change (reload applies models and aliases only): read once.
  const r = n.config.routing;
  const api = n.config.api;
  let roundRobin = 0;
  return {
    name: n.name,
    rules: {
      queueMax: r.queue_max,
      queueTimeoutMs: r.queue_timeout,
      batchQueueTimeoutMs: r.batch_queue_timeout,
      forwardRetry: r.forward_retry,
      forwardWaitMs: r.forward_wait,
      performance: r.performance,
      streamStallMs: api.stream_stall,
      writeStallMs: api.write_stall,
      prefixAffinity: r.prefix_affinity,
      agentHygiene: api.agent_hygiene,
    },
    now: n.now,
    random: Math.random,
    nextRoundRobin: () => roundRobin++,
    snapshot: () => n.hostViews(),
    warming: () => n.warming,
    refresh: (pin) => refreshStale(n.poller, n.members, n.now, r.stale_after, pin),
    waiting,
    slots: {
      tryLease: (model, workload, key, flow) => n.gate.tryLease(model, workload, key, flow),
      does: (model, workload) => n.slots.does(model, workload),
      heldBy: (lease, member) => n.slots.heldBy(lease, member),
      wait: (model, workload, key, flow, ms, signal) => n.gate.wait(model, workload, key, flow, ms, signal),
    },
    forwards: n.forwards,
    queues: n.queues,
    aliases: n.aliases,
    peers,
    recordScore: (model, tokens, ttft) => n.perf.record(model, tokens, ttft),
    tokenizer: (model) => tokenizerFor(n.backends, model),
    metrics: n.metrics,
    decisions: n.decisions,
    log: n.log,
    cache: n.cacheBook,
    returnChance: n.turnGaps.chance,
    loads: n.loads,
    served: (rr, used) => n.served(rr, used),
    history: n.history.store,
    timelines: n.timelines,
    ...(n.tracing ? { tracing: n.tracing } : {}),
    drainingSince: () => n.drainingSince,
    moves: n.moves,
  };
}

/** The node's parts its /v1/capacity report is made of. */
export interface ReportParts extends Pick<DispatchParts, 'name' | 'now' | 'slots' | 'perf' | 'queues' | 'aliases' | 'cacheBook' | 'turnGaps'> {
  readonly version: string;
  readonly draining: boolean;
  readonly keys: Keyring;
  readonly lifecycle: Lifecycle;
  readonly reserve: ReserveBook;
  readonly lends: LendBook;
}

/** What this node's /v1/capacity report is made of (capacity/report.ts); `files`: its model files and fetches. */
export function reportSource(n: ReportParts, files: Pick<ModelFilePolicy, 'fileOf' | 'fetchOf' | 'hasFile'>): ReportSource {
  return {
    lifecycle: n.lifecycle,
    name: n.name,
    version: n.version,
    now: n.now,
    slots: n.slots,
    perf: n.perf,
    queued: (model) => n.queues.depth(model),
    get aliasVersion() {
      return n.aliases.version;
    },
    keys: n.keys.table,
    get draining() {
      return n.draining;
    },
    cache: n.cacheBook,
    turnGaps: () => n.turnGaps.curve(),
    heldBack: (model, slots) => n.reserve.published(model, slots),
    fileOf: (model) => files.fileOf(model),
    fetchOf: (model) => files.fetchOf(model),
    hasFile: (model) => files.hasFile(model),
    lending: () => (n.lends.enabled ? { lent: n.lends.lentBytes(), lends: n.lends.list().map((l) => ({ to: l.to, model: l.model, bytes: l.bytes })) } : undefined),
  };
}

/** The node's parts on-demand loads, the poll interest and the history read (each reads the routing snapshot). */
export interface SnapshotParts extends Pick<DispatchParts, 'name' | 'config' | 'now' | 'log' | 'slots' | 'forwards' | 'queues' | 'decisions' | 'members' | 'poller' | 'metrics' | 'hostViews'> {
  loadModel(model: string, reason: LoadReason, detail: string): LoadAnswer;
}

/** What on-demand loads ask of this node (dispatch/entry/load.ts): this node's own lifecycle, or a member's over `peers`. */
export function loadPorts(n: SnapshotParts, peers: PeerLink): LoadPorts {
  return {
    self: n.name,
    loadWaitMs: n.config.routing.load_wait,
    now: n.now,
    snapshot: () => n.hostViews(),
    askLocal: (model, reason, detail) => localLoadAsk(n.loadModel(model, reason, detail)),
    askRemote: (host, model, reason, detail) => askMemberLoad(peers, host, model, reason, detail),
    log: (msg) => n.log.info(msg),
  };
}

/** What the poll interest reads (capacity/interest.ts). */
export function interestPorts(n: SnapshotParts): InterestPorts {
  return {
    self: n.name,
    windowMs: n.config.mesh.capacity_interest,
    now: n.now,
    localModels: () => n.slots.models(),
    forwards: n.forwards,
    decisions: n.decisions,
    waiting: () => n.queues.entries(),
    snapshot: () => n.hostViews(),
    apiOf: (host) => n.members.get(host)?.api,
    poller: () => n.poller,
  };
}

/** What the history samples (history/node-history.ts). */
export function historySources(n: SnapshotParts): HistorySources {
  return {
    self: n.name,
    now: n.now,
    hosts: () => n.hostViews(),
    queuedHere: (model) => n.queues.depth(model),
    membersAlive: () => n.members.aliveCount(),
    refusedTotal: () => n.metrics.forwardsRefused(),
    log: (msg) => n.log.warn(msg),
  };
}
