/**
 * The ports this node hands the rooms that ask the most of it: the
 * dispatcher's (dispatch/ports.ts) and the capacity report's source
 * (capacity/report.ts), built from the node's parts. Wiring only.
 */
import type { AliasTable } from '../aliases/table.ts';
import type { ReportSource } from '../capacity/report.ts';
import type { Config } from '../config/schema.ts';
import type { DecisionFeed } from '../dispatch/decisions.ts';
import type { Loads } from '../dispatch/entry/load.ts';
import type { DispatchPorts } from '../dispatch/ports.ts';
import type { Reservation } from '../dispatch/types.ts';
import type { Backend } from '../engines/backend.ts';
import type { CacheBook } from '../engines/cache-book.ts';
import type { SlotTable } from '../engines/targets.ts';
import { tokenizerFor } from '../engines/tokenize.ts';
import type { ModelFilePolicy } from '../files/model-files.ts';
import type { ForwardBook } from '../forward/book.ts';
import type { PeerLink } from '../forward/send.ts';
import type { Lifecycle } from '../lifecycle/lifecycle.ts';
import type { Log } from '../log.ts';
import type { Metrics } from '../metrics/metrics.ts';
import type { PerfScores } from '../perf/scores.ts';
import type { QueueSet } from '../queue/fifo.ts';
import type { HostView } from '../route/types.ts';

/** The node's parts the dispatcher reads (ViiworkNode has them all). */
export interface DispatchParts {
  readonly name: string;
  readonly config: Config;
  readonly now: () => number;
  readonly slots: SlotTable;
  readonly forwards: ForwardBook;
  readonly queues: QueueSet<Reservation>;
  readonly aliases: AliasTable;
  readonly perf: PerfScores;
  readonly metrics: Metrics;
  readonly decisions: DecisionFeed;
  readonly log: Log;
  readonly cacheBook: CacheBook;
  readonly loads: Loads;
  readonly backends: readonly Backend[];
  readonly warming: Promise<void> | undefined;
  hostViews(): HostView[];
  nextRoundRobin(): number;
}

/** What the dispatcher may use of this node; `peers` calls members, `waiting` hurries them (capacity/interest.ts). */
export function dispatchPorts(n: DispatchParts, peers: PeerLink, waiting: () => void): DispatchPorts {
  // routing.* and api.* need a restart to change (reload applies models and aliases only): read once.
  const r = n.config.routing;
  const api = n.config.api;
  return {
    name: n.name,
    rules: {
      queueMax: r.queue_max,
      queueTimeoutMs: r.queue_timeout,
      forwardRetry: r.forward_retry,
      performance: r.performance,
      streamStallMs: api.stream_stall,
      writeStallMs: api.write_stall,
      prefixAffinity: r.prefix_affinity,
      agentHygiene: api.agent_hygiene,
    },
    now: n.now,
    random: Math.random,
    nextRoundRobin: () => n.nextRoundRobin(),
    snapshot: () => n.hostViews(),
    warming: () => n.warming,
    waiting,
    slots: n.slots,
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
    loads: n.loads,
  };
}

/** The node's parts its /v1/capacity report is made of. */
export interface ReportParts extends Pick<DispatchParts, 'name' | 'now' | 'slots' | 'perf' | 'queues' | 'aliases' | 'cacheBook'> {
  readonly version: string;
  readonly lifecycle: Lifecycle;
}

/** What this node's /v1/capacity report is made of (capacity/report.ts); `files`: its model files and fetches. */
export function reportSource(n: ReportParts, files: Pick<ModelFilePolicy, 'fileOf' | 'fetchOf'>): ReportSource {
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
    cache: n.cacheBook,
    fileOf: (model) => files.fileOf(model),
    fetchOf: (model) => files.fetchOf(model),
  };
}
