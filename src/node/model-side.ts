/**
 * The node's model entries, assembled: their files (the hash index, the file
 * server for members, which copy an entry may load), their backends, the
 * lists of models: auto endpoints, the memory budget and the lifecycle of
 * loads. Wiring only: the rules live in files/ and lifecycle/.
 */
import type { Agent } from 'undici';
import type { CapacityPoller } from '../capacity/poller.ts';
import { findsNoMembers, type Config } from '../config/schema.ts';
import type { DecisionFeed } from '../dispatch/decisions.ts';
import type { Reservation } from '../dispatch/types.ts';
import type { SlotTable } from '../engines/targets.ts';
import { FileIndex } from '../files/hash-index.ts';
import { ModelFilePolicy } from '../files/model-files.ts';
import { FileServer } from '../files/serve.ts';
import { EntryBackends } from '../lifecycle/backends.ts';
import { MemoryBudget } from '../lifecycle/budget.ts';
import { reportLifecycleEvent } from '../lifecycle/events.ts';
import { Lifecycle } from '../lifecycle/lifecycle.ts';
import { ListedModels } from '../lifecycle/listed-models.ts';
import type { Log } from '../log.ts';
import type { MemberTable } from '../mesh/members.ts';
import type { Metrics } from '../metrics/metrics.ts';
import type { QueueSet } from '../queue/fifo.ts';
import type { MeshMode } from '../security/secret.ts';
import { EMPTY_BODY_SHA256 } from '../security/signing.ts';
import { SlotStore } from '../survive/slot-store.ts';
import type { CacheBook } from '../engines/cache-book.ts';
import { CacheMover } from '../files/cache-move.ts';
import type { PerfScores } from '../perf/scores.ts';
import type { HostView } from '../route/types.ts';

/** The node's parts its model entries use (ViiworkNode has them all; poller and peerAgent are read when used). */
export interface ModelParts {
  readonly name: string;
  /** Read when used: a reload replaces the model entries. */
  readonly config: Config;
  readonly now: () => number;
  readonly log: Log;
  readonly metrics: Metrics;
  readonly decisions: DecisionFeed;
  readonly slots: SlotTable;
  readonly cacheBook: CacheBook;
  readonly queues: QueueSet<Reservation>;
  readonly members: MemberTable;
  readonly meshMode: MeshMode;
  readonly poller: CapacityPoller | undefined;
  readonly peerAgent: Agent;
  signForward(method: string, pathWithQuery: string, bodySha256: string, to: string): Record<string, string>;
  readonly perf: PerfScores;
  hostViews(): HostView[];
}

export interface ModelSide {
  fileIndex: FileIndex;
  files: FileServer;
  modelFiles: ModelFilePolicy;
  engines: EntryBackends;
  listed: ListedModels;
  budget: MemoryBudget;
  lifecycle: Lifecycle;
  /** Slot caches moved between members (SPEC 13). */
  moves: CacheMover;
}

export function modelSide(n: ModelParts, o: { env?: NodeJS.ProcessEnv; listRefreshMs?: number; stopping: AbortSignal }): ModelSide {
  // node.* needs a restart to change (reload applies models and aliases only): read once.
  const node = n.config.node;
  const fileIndex = new FileIndex({ stateDir: node.state_dir, log: (msg) => n.log.info(msg) });
  const keeper = new SlotStore({
    stateDir: node.state_dir,
    diskMiB: node.cache_disk,
    book: n.cacheBook,
    sha256Of: (p) => fileIndex.lookup(p)?.sha256,
    log: (line) => n.log.info(line),
  });
  const moves: CacheMover = new CacheMover({
    self: n.name,
    members: n.members,
    link: {
      apiOf: (host) => n.members.get(host)?.api,
      signsBody: n.meshMode.mode === 'secured',
      sign: (method, p, sha, to) => n.signForward(method, p, sha, to),
      get dispatcher() {
        return n.peerAgent;
      },
    },
    store: keeper,
    book: n.cacheBook,
    backends: (model) => engines.list.filter((b) => b.info.model === model),
    lease: (model) => n.slots.tryLease(model, 'chat'),
    hosts: () => n.hostViews(),
    prefillMsPer1k: (model) => n.perf.published(model).prefill_ms_per_1k,
    metrics: n.metrics,
    log: (line) => n.log.info(line),
    now: n.now,
  });
  const files = new FileServer({
    self: n.name,
    mode: n.meshMode,
    members: n.members,
    // A cache move's file (files/cache-move.ts) travels the same way, by the hash its holder named.
    byHash: (sha) => fileIndex.byHash(sha) ?? moves.byHash(sha),
    rate: node.transfer_rate,
    log: (msg) => n.log.info(msg),
    onSent: (bytes) => n.metrics.fileTransferBytes.inc({ direction: 'sent' }, bytes),
    onServed: (sha) => moves.served(sha),
  });
  const modelFiles = new ModelFilePolicy({
    modelsDir: node.models_dir,
    models: () => n.config.models,
    findsNoMembers: () => findsNoMembers(n.config),
    index: fileIndex,
    members: () => n.members.peers(),
    reportOf: (name) => n.poller?.get(name),
    load: (model, reason, detail) => lifecycle.load(model, reason, detail),
    headers: (s, p) => n.signForward('GET', p, EMPTY_BODY_SHA256, s.name),
    dispatcher: () => n.peerAgent,
    stopping: o.stopping,
    log: (msg) => n.log.info(msg),
    metrics: n.metrics,
  });
  const engines = new EntryBackends({
    slots: n.slots,
    pump: () => n.queues.pumpAll(),
    lifecycle: () => lifecycle,
    files: modelFiles,
    stateDir: node.state_dir,
    log: n.log,
    metrics: n.metrics,
    keeper,
  });
  const listed = new ListedModels({
    apply: (models, why) => engines.apply(models, why),
    adopt: (model, detail) => void lifecycle.load(model, 'start', detail),
    maxName: n.config.api.max_model_name,
    log: n.log,
    env: o.env,
    intervalMs: o.listRefreshMs,
  });
  const budget = new MemoryBudget(node.memory_budget, () => ({ pids: engines.pids(), accounted: lifecycle.accounted() }));
  const lifecycle: Lifecycle = new Lifecycle({
    slots: n.slots,
    queued: (model) => n.queues.depth(model),
    budget: () => budget.bytes,
    create: (entry, infos) => engines.createFor(entry, infos),
    swap: (old, next) => engines.swap(old, next),
    onEvent: (e) => {
      reportLifecycleEvent(e, { node: n.name, log: n.log, metrics: n.metrics, feed: n.decisions });
      n.queues.pumpAll();
    },
    prepare: (entry, fetching) => modelFiles.prepare(entry, fetching),
  });
  return { fileIndex, files, modelFiles, engines, listed, budget, lifecycle, moves };
}
