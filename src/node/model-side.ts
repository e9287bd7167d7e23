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
import { LendBook } from '../split/lends.ts';
import { RpcServer, rpcServerBinary, rpcThreads } from '../engines/llamacpp/rpc-server.ts';
import { SplitRunner } from '../split/runner.ts';
import { openTunnel } from '../split/tunnel.ts';
import { bytesText, splitOf, type SplitChoice } from '../lifecycle/lifecycle.ts';

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
  /** The chance a conversation idle so long comes back (route/slots.ts TurnGaps): which a drain hands on. */
  readonly turnGaps: { readonly chance: (idleMs: number) => number };
  /** Read when used: this node is draining (SPEC 13). */
  readonly draining: boolean;
  hostViews(): HostView[];
  /** This node's advertise address (connections to members leave from it), once known. */
  readonly advertise: string | undefined;
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
  /** Memory this node lends to members (SPEC 11, a model bigger than one host). */
  lends: LendBook;
  /** Models this node runs split across members (SPEC 11). */
  splits: SplitRunner;
}

/** The ggml-rpc-server this node runs: node.rpc_server, else the one beside its first llamacpp entry's llama-server. */
export function rpcBinaryOf(config: Config): string {
  const llama = config.models.find((m) => m.engine === 'llamacpp');
  return rpcServerBinary(config.node.rpc_server, llama?.engine === 'llamacpp' ? llama.llamacpp.binary : 'llama-server');
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
  // Calls to members (cache moves, lend asks): signed as this node, over the peer agent.
  const link = {
    apiOf: (host: string) => n.members.get(host)?.api,
    signsBody: n.meshMode.mode === 'secured',
    sign: (method: string, p: string, sha: string, to: string) => n.signForward(method, p, sha, to),
    get dispatcher() {
      return n.peerAgent;
    },
  };
  const moves: CacheMover = new CacheMover({
    self: n.name,
    members: n.members,
    link,
    store: keeper,
    book: n.cacheBook,
    backends: (model) => engines.list.filter((b) => b.info.model === model),
    lease: (model) => n.slots.tryLease(model, 'chat'),
    hosts: () => n.hostViews(),
    prefillMsPer1k: (model) => n.perf.published(model).prefill_ms_per_1k,
    returnChance: (idleMs) => n.turnGaps.chance(idleMs),
    draining: () => n.draining,
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
  const lends: LendBook = new LendBook({
    enabled: node.lend_memory,
    free: () => lifecycle.memory().free,
    start: (id) => RpcServer.start({ binary: rpcBinaryOf(n.config), threads: rpcThreads(), log: (line) => n.log.debug(`[lend ${id}] ${line}`) }),
    now: n.now,
    log: (line) => n.log.info(line),
    changed: () => n.slots.changed(),
  });
  const splits = new SplitRunner({
    self: n.name,
    link,
    snapshot: () => n.hostViews(),
    memberState: (name) => n.members.get(name)?.state,
    openTunnel: (member, lendId) => {
      const url = n.members.get(member)?.api;
      if (!url) return Promise.reject(new Error(`member ${member} has no API address`));
      return openTunnel({ mode: n.meshMode, self: n.name, member, url, lendId, log: n.log, localAddress: n.advertise });
    },
    startLocal: (llamaServer) => RpcServer.start({ binary: rpcServerBinary(node.rpc_server, llamaServer), threads: rpcThreads(), log: (line) => n.log.debug(`[split] ${line}`) }),
    log: (line) => n.log.warn(line),
    now: n.now,
  });
  const lifecycle: Lifecycle = new Lifecycle({
    lent: () => lends.lentBytes(),
    split: {
      plan: (entry, need, free): SplitChoice => {
        const p = splits.plan(need, free, splitOf(entry) ?? 'auto');
        if (p.kind === 'none') return p;
        // A plan that finds it whole here (free moved meanwhile) is not a split: the load is refused and asked again.
        if (p.kind === 'whole') return { kind: 'none', why: 'it fits here whole now; ask again' };
        return { kind: 'split', here: p.parts[0].bytes, parts: p.parts, detail: `split across ${p.parts.map((x) => `${x.member} (${bytesText(x.bytes)})`).join(', ')}` };
      },
      create: async (entry, infos, parts) => {
        if (entry.engine !== 'llamacpp') throw new Error(`${entry.name}: only a llamacpp entry runs split`);
        const run = await splits.assemble(entry.name, entry.llamacpp.binary, parts);
        let made;
        try {
          made = await engines.createSplit(entry, infos, run.args, () => run.close());
        } catch (err) {
          await run.close();
          throw err;
        }
        run.onLost((why) => lifecycle.dropped(made[0], why));
        // Its llama-server ending (a part's connection cut: llama.cpp aborts) stops the model as a lost lender does.
        made[0].on('state', (state: string) => {
          // 'dead' only: with no restart budget an exit is dead at once, while one slow health check is merely 'unhealthy'.
          if (state === 'dead') lifecycle.dropped(made[0], `its llama-server ended (${made[0].reason}): a part of the model is out of reach`);
        });
        return made;
      },
    },
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
  return { fileIndex, files, modelFiles, engines, listed, budget, lifecycle, moves, lends, splits };
}
