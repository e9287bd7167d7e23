/**
 * One viiwork node: the assembly of config, engines, slots, queues, scores
 * and the HTTP API. Everything that decides lives in the rooms it imports;
 * this file only wires them (some in parts: slot-side.ts, model-side.ts,
 * keys-side.ts, mesh-side.ts, ports.ts) and owns their lifetimes.
 */
import fs from 'node:fs';
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Agent } from 'undici';
import { AliasTable } from '../aliases/table.ts';
import type { ApiNode, NodePhase } from '../api/ports.ts';
import type { RequestLimits } from '../api/request.ts';
import { closeApi, serveApi } from '../api/server.ts';
import type { HeldDigests } from '../capacity/digest.ts';
import { PollInterest } from '../capacity/interest.ts';
import type { CapacityPoller } from '../capacity/poller.ts';
import type { ReleaseWaits } from '../capacity/release-waits.ts';
import { buildReport, type CapacityReport } from '../capacity/report.ts';
import { reloaded, restartNeeded, roleOf } from '../config/reload.ts';
import type { Keyring } from '../keys/access.ts';
import type { Limiter } from '../keys/limiter.ts';
import type { ServedRecord, UsageBook, UsageRow } from '../keys/usage.ts';
import { keySide, recordUsage, settleServed } from './keys-side.ts';
import { meshUsage } from '../forward/mesh-usage.ts';
import type { Config } from '../config/schema.ts';
import { DecisionFeed } from '../dispatch/decisions.ts';
import { TimelineBook, type TimelineDoc } from '../dispatch/timeline.ts';
import { fetchMemberTimeline } from '../api/timeline.ts';
import { Dispatcher } from '../dispatch/dispatcher.ts';
import { Loads } from '../dispatch/entry/load.ts';
import type { Reservation, RoutedRequest } from '../dispatch/types.ts';
import type { ServedUsage } from '../dispatch/ports.ts';
import type { Backend } from '../engines/backend.ts';
import type { TurnGaps } from '../route/slots.ts';
import type { CacheBook } from '../engines/cache-book.ts';
import { hideConfiguredKeys } from '../engines/llamacpp/engine-env.ts';
import { SlotTable, type Lease } from '../engines/targets.ts';
import type { Workload } from '../workloads/workloads.ts';
import type { FileIndex } from '../files/hash-index.ts';
import { modelFilePaths } from '../files/paths.ts';
import type { FileServer } from '../files/serve.ts';
import type { CacheMover } from '../files/cache-move.ts';
import { NodeHistory } from '../history/node-history.ts';
import { modelSide, type ModelSide } from './model-side.ts';
import { slotSide } from './slot-side.ts';
import { tracingFor, type Tracing } from '../telemetry/tracing.ts';
import { ForwardBook } from '../forward/book.ts';
import { askLifecycle } from '../forward/lifecycle-ask.ts';
import { peerLink } from '../forward/peer-link.ts';
import type { PeerLink } from '../forward/send.ts';
import { bindFailure, localUrl } from '../http/listen.ts';
import type { LifecycleReply } from '../lifecycle/answers.ts';
import { warmUp } from '../lifecycle/ready.ts';
import type { MemoryBudget } from '../lifecycle/budget.ts';
import type { Lifecycle, LoadAnswer, LoadReason, UnloadAnswer } from '../lifecycle/lifecycle.ts';
import { createLog, type Log } from '../log.ts';
import { MemberTable } from '../mesh/members.ts';
import type { Membership } from '../mesh/membership.ts';
import { Metrics } from '../metrics/metrics.ts';
import type { PerfScores } from '../perf/scores.ts';
import type { QueueSet } from '../queue/fifo.ts';
import type { SlotGate } from '../queue/gate.ts';
import type { ReserveBook } from '../queue/reserve.ts';
import type { HostView } from '../route/types.ts';
import { memberHeaders } from '../security/headers.ts';
import { loadMeshMode, type MeshMode } from '../security/secret.ts';
import { VERSION } from '../version.ts';
import { startMeshSide } from './mesh-side.ts';
import { pollMembers } from '../capacity/poll-targets.ts';
import type { KeySync } from '../keys/sync.ts';
import { dispatchPorts, historySources, interestPorts, loadPorts, reportSource } from './ports.ts';
import { OpenBodies } from '../http/open-bodies.ts';
import { localView, peerViews } from '../capacity/views.ts';
import { versionReach } from '../capacity/reach.ts';
import { onDemandWorkload } from '../route/placement.ts';
import { Drain, WorkCount } from '../survive/drain.ts';
import type { LendBook } from '../split/lends.ts';
import { tunnelUpgrade, type UpgradeHandler } from '../split/tunnel.ts';

export type { NodePhase };

export interface NodeOptions {
  log?: Log;
  now?: () => number;
  env?: NodeJS.ProcessEnv;
  /** How often models: auto endpoints are listed again (default LIST_REFRESH_MS, 10 s; tests shorten it). */
  listRefreshMs?: number;
  /** Unrecoverable after start (another live node has our name). Default: log and stop. */
  onFatal?: (message: string) => void;
  /** A drain (SPEC section 13) has stopped the node: `viiwork serve` exits then. */
  onDrained?: () => void;
}

export class ViiworkNode implements ApiNode {
  readonly name: string;
  readonly version = VERSION;
  readonly log: Log;
  readonly now: () => number;
  phase: NodePhase = 'starting';
  readonly metrics = new Metrics();
  readonly meshMode: MeshMode;
  /** Request bodies arriving now, per client address (api.max_open_bodies). */
  readonly openBodies: OpenBodies;
  /** Client keys: this node's plain keys (api.keys_env, a plain api.keys_file) and the mesh-wide key table (SPEC section 12). */
  readonly keys: Keyring;
  /** Keys' limits held across the mesh: this node's windows, its reports to owners, and the keys it owns. */
  readonly limiter: Limiter;
  /** Usage per key and model served here, in hourly rollups (SPEC section 12). */
  readonly usage: UsageBook;
  readonly slots = new SlotTable();
  /** Every lease of a slot here passes it; forwards that find this node full may wait in its line (queue/gate.ts). */
  readonly gate: SlotGate<Workload, Lease>;
  /** When interactive requests last asked for each model's slots here: the room kept for them (queue/reserve.ts). */
  readonly reserve: ReserveBook;
  /** The gaps between conversations' turns this node's slots saw: how long an idle conversation stays live (route/slots.ts). */
  readonly turnGaps: TurnGaps;
  /** What this node sent its engines and what their caches are believed to hold (issue 17); it chooses their slots. */
  readonly cacheBook: CacheBook;
  readonly queues: QueueSet<Reservation>;
  readonly perf: PerfScores;
  readonly members: MemberTable;
  readonly forwards: ForwardBook;
  readonly aliases: AliasTable;
  readonly decisions = new DecisionFeed();
  readonly timelines: TimelineBook;
  /** OpenTelemetry traces, when telemetry.otlp_endpoint is set. */
  readonly tracing: Tracing | undefined;
  /** Series over time, of this node and of what it sees of every member (SPEC section 10). */
  readonly history: NodeHistory;
  /** Reports of the other members, polled (made once the mesh is up). */
  poller: CapacityPoller | undefined;
  membership: Membership | undefined;
  /** Connections to other nodes' APIs, leaving from the advertise address (made once it is known). */
  peerAgent!: Agent;
  /** node.memory_budget: fixed, or re-read from the GPUs every 10 s. */
  readonly budget: MemoryBudget;
  /** Loads and unloads of this node's model entries (SPEC section 11). */
  readonly lifecycle: Lifecycle;
  /** On-demand loads this node asks of hosts for its requests. */
  readonly loads: Loads;
  /** The life of each request: placement, runs, forwards, measurement. */
  readonly dispatcher: Dispatcher;
  /** SHA-256 of this node's model files, hashed in the background (SPEC section 11). */
  readonly fileIndex: FileIndex;
  /** GET /v1/files/{sha256} for members. */
  readonly files: FileServer;
  /** Slot caches moved between members (SPEC 13): POST /v1/slot-cache/save and take, and the executor's pulls. */
  readonly moves: CacheMover;
  /** Memory lent to members running a model bigger than one host (SPEC 11): POST /v1/split/lend, renew, release. */
  readonly lends: LendBook;
  /** The members-only tunnel to lent memory (an HTTP Upgrade on the API port), on a node that lends. */
  readonly upgrade: UpgradeHandler | undefined;
  /** The backends by model entry, the lists of models: auto endpoints, which copy of a model file may be used (node/model-side.ts). */
  readonly #models: ModelSide;
  /** Which members this node routes to and hurries (capacity/interest.ts). */
  readonly #interest: PollInterest;
  /** Members' capacity polls held open for a slot to free here (?wait=). */
  readonly #releaseWaits: ReleaseWaits;
  /** Calls to members: forwards, load and unload asks. */
  readonly #peers: PeerLink;
  /** Pulls a member's key table when its key_digest is not ours (keys/sync.ts). */
  readonly #keySync: KeySync;
  readonly #onFatal: (message: string) => void;
  /** Inference requests held here, counted until their answers close: what a drain waits for. */
  readonly work = new WorkCount();
  readonly #drain: Drain;
  /** api.* and routing.* need a restart to change (reload applies models and aliases only): read once. */
  readonly #limits: RequestLimits;
  /** Aborted when the node stops: fetches in flight end, keeping their partial files. */
  readonly #stopping = new AbortController();
  #server: http.Server | undefined;
  #tick: NodeJS.Timeout | undefined;
  #saveTimer: NodeJS.Timeout | undefined;
  /** Set while the node is starting (SPEC section 4): /health says `starting`, unknown models wait for it. */
  #ready!: () => void;
  #warmUp: Promise<void> | undefined = new Promise<void>((resolve) => (this.#ready = resolve));

  constructor(
    public config: Config,
    opts: NodeOptions = {},
  ) {
    this.name = config.node.name;
    this.timelines = new TimelineBook(this.name);
    this.log = opts.log ?? createLog(this.name);
    this.now = opts.now ?? Date.now;
    this.#limits = { maxModelName: config.api.max_model_name, maxJsonDepth: config.api.max_json_depth };
    const slots = slotSide(this);
    this.queues = slots.queues;
    this.perf = slots.perf;
    this.reserve = slots.reserve;
    this.gate = slots.gate;
    this.#releaseWaits = slots.releaseWaits;
    this.turnGaps = slots.turnGaps;
    this.cacheBook = slots.cacheBook;
    this.meshMode = loadMeshMode(opts.env ?? process.env, config.mesh.open);
    this.#onFatal = opts.onFatal ?? ((message) => (this.log.error(message), void this.stop()));
    this.members = new MemberTable(this.name, this.now);
    this.forwards = new ForwardBook(this.now);
    this.aliases = AliasTable.load(config.node.state_dir, { log: (msg) => this.log.warn(msg), now: this.now });
    this.aliases.seed(config.aliases);
    this.#peers = peerLink({
      self: this.name,
      mode: this.meshMode,
      members: this.members,
      staleAfterMs: config.routing.stale_after,
      now: this.now,
      polledAt: (host) => this.poller?.get(host)?.polledAt,
      agent: () => this.peerAgent,
    });
    const models = (this.#models = modelSide(this, { env: opts.env, listRefreshMs: opts.listRefreshMs, stopping: this.#stopping.signal }));
    this.fileIndex = models.fileIndex;
    this.files = models.files;
    this.moves = models.moves;
    this.lends = models.lends;
    // Only a node that lends memory listens for the tunnel's upgrades (split/tunnel.ts).
    if (this.lends.enabled)
      this.upgrade = tunnelUpgrade({
        mode: this.meshMode,
        self: this.name,
        members: this.members,
        lendPort: (id, member) => this.lends.lendPort(id, member),
        log: this.log,
        onReject: () => this.metrics.authRejected.inc({ reason: 'split' }),
      });
    this.budget = models.budget;
    this.lifecycle = models.lifecycle;
    this.loads = new Loads(loadPorts(this, this.#peers));
    this.#interest = new PollInterest(interestPorts(this));
    this.history = new NodeHistory(historySources(this));
    this.tracing = tracingFor(config.telemetry, opts.env ?? process.env, { node: this.name, version: VERSION, log: (msg) => this.log.warn(msg), failed: () => this.metrics.otlpExportFailures.inc({}) });
    this.dispatcher = new Dispatcher(dispatchPorts(this, this.#peers, () => this.#interest.hurry()));
    this.openBodies = new OpenBodies(config.api.max_open_bodies);
    const keys = keySide(this, this.#peers, opts.env ?? process.env);
    this.keys = keys.keys;
    this.#keySync = keys.keySync;
    this.limiter = keys.limiter;
    this.usage = keys.usage;
    hideConfiguredKeys(config);
    this.#drain = new Drain({
      now: this.now,
      timeoutMs: config.node.drain_timeout,
      noticeMs: config.mesh.capacity_poll + config.routing.stale_after,
      members: () => this.members.peers().filter((m) => m.state === 'alive' && m.api).map((m) => m.name),
      busy: () => this.work.count,
      handOff: (since) => this.moves.handOff(config.node.cache_disk, since),
      stop: () => this.stop().then(() => opts.onDrained?.()),
      log: (line) => this.log.info(line),
    });
  }

  /** Every backend of this node. */
  get backends(): readonly Backend[] {
    return this.#models.engines.list;
  }

  get apiPort(): number {
    return this.apiAddress.port;
  }

  get advertise(): string | undefined {
    return this.membership?.advertise;
  }

  get requestLimits(): RequestLimits {
    return this.#limits;
  }

  /** undefined once the node is ready; while it starts, resolves when it is. */
  get warming(): Promise<void> | undefined {
    return this.#warmUp;
  }

  /** The API address actually bound (port 0 in config picks a free one). */
  get apiAddress(): { host: string; port: number } {
    const a = this.#server?.address() as AddressInfo | undefined;
    return { host: this.config.api.host, port: a?.port ?? this.config.api.port };
  }

  get apiUrl(): string {
    return localUrl(this.apiAddress.host, this.apiAddress.port);
  }

  loadModel(model: string, reason: LoadReason, detail: string): LoadAnswer {
    return this.lifecycle.load(model, reason, detail);
  }

  unloadModel(model: string, detail: string): UnloadAnswer {
    return this.lifecycle.unload(model, detail);
  }

  askMember(host: string, model: string, action: 'load' | 'unload', detail: string): Promise<LifecycleReply> {
    const local = { link: this.#peers, known: (h: string) => !!this.members.get(h), load: (m: string, d: string) => this.loadModel(m, 'operator', d), unload: (m: string, d: string) => this.unloadModel(m, d) };
    return askLifecycle(local, host, model, action, detail);
  }

  placeModel(model: string, detail: string): Promise<{ host?: string; why: string }> {
    return this.loads.place(model, onDemandWorkload(this.hostViews(), model), detail);
  }

  /** True while draining (SPEC section 13): the report says so and no entry places work here. */
  get draining(): boolean {
    return this.#drain.draining;
  }

  get drainingSince(): number | undefined {
    return this.#drain.since;
  }

  /** Drain, then leave the mesh and stop (survive/drain.ts); a second ask joins the first. */
  drain(why: string): Promise<void> {
    return this.#drain.begin(why);
  }

  capacityReport(held?: HeldDigests, member?: string): CapacityReport {
    this.#drain.reported(member);
    return buildReport(reportSource(this, this.#models.modelFiles), held, member);
  }

  slotReleased(model: string, ms: number): Promise<void> {
    return this.#releaseWaits.released(model, ms);
  }

  aliasReach(version: number): { reached: number; members: number } {
    return versionReach(version, this.aliases.version, this.members.peers(), this.poller);
  }

  keyReach(version: number): { reached: number; members: number } {
    return versionReach(version, this.keys.table.version, this.members.peers(), this.poller, 'key_version');
  }

  /** The routing snapshot: this node now, and every alive or suspect peer from its last report. */
  hostViews(): HostView[] {
    const now = this.now();
    const files = this.#models.modelFiles;
    const self = localView(this.name, this.slots, this.perf, now, this.cacheBook, this.lifecycle, files, this.reserve);
    if (this.#drain.draining) self.draining = true;
    if (this.lends.enabled) {
      self.lends = true;
      self.lentTo = this.lends.list().map((l) => ({ to: l.to, model: l.model, bytes: l.bytes }));
    }
    return [
      self,
      ...peerViews(this.members.peers(), this.poller, this.config.routing.stale_after, now),
    ];
  }

  /** A local run ended with the engine's answer: usage recorded, the key's limits settled (SPEC 12). */
  served(rr: RoutedRequest, used: ServedUsage): void {
    settleServed(this, rr, used);
  }

  recordUsage(r: ServedRecord): void {
    recordUsage(this, r);
  }

  meshUsage(sinceMs: number, key: string | undefined, byHour: boolean): Promise<{ rows: UsageRow[]; missing: string[] }> {
    return meshUsage(this.#peers, this.members, (s, k, h) => this.usage.rows(s, k, h), sinceMs, key, byHour);
  }

  memberTimeline(host: string, id: string): Promise<TimelineDoc | { error: string }> {
    return fetchMemberTimeline(this.#peers, host, id);
  }

  /** Headers that make a request a forward from this node: signed in a secured mesh, the name alone in an open one. */
  signForward(method: string, pathWithQuery: string, bodySha256: string, to: string): Record<string, string> {
    return memberHeaders(this.meshMode, this.name, method, pathWithQuery, bodySha256, to);
  }

  async start(): Promise<void> {
    fs.mkdirSync(this.config.node.state_dir, { recursive: true });
    // Tracing's SDK is loaded on demand; a request that arrives is traced from the first.
    await this.tracing?.ready;
    const server = await serveApi(this);
    this.#server = server;
    this.log.info(`api listening on ${this.apiUrl}`);
    try {
      await this.#startMesh();
    } catch (err) {
      server.close();
      throw bindFailure(err, 'gossip', `${this.config.mesh.advertise || 'the advertise address'}:${this.config.mesh.port}`, 'mesh.advertise, mesh.port');
    }

    await this.#models.listed.watch(this.config.models); // models: auto entries start with what their endpoints list
    const fresh = await this.#models.engines.startWith(this.#models.listed.entries());
    this.phase = 'running';
    const warm = warmUp({
      firstJoin: () => this.membership?.firstJoin(),
      joined: () => this.#membersChanged(),
      pollMs: this.config.mesh.capacity_poll,
      firstRound: (withinMs) => this.poller?.round(this.now(), withinMs),
      backends: fresh,
    });
    void warm.finally(() => {
      this.#warmUp = undefined;
      this.#ready();
      this.log.info('ready: joined, reports in, engines checked');
      this.queues.pumpAll();
    });
    this.#tick = setInterval(() => {
      // Also how a batch request held off the room kept for interactive work gets it once that room lapses (queue/reserve.ts).
      this.queues.pumpAll();
      this.gate.pump();
      this.#interest.hurry();
      this.#interest.noteAsked();
      this.loads.waitingIn(this.queues, this.config.routing.scale_after);
      this.#models.modelFiles.loadWaiting();
    }, 250);
    this.#tick.unref();
    this.#saveTimer = setInterval(() => (this.perf.trySave((msg) => this.log.warn(msg)), this.usage.save()), 30_000);
    this.#saveTimer.unref();
    this.lifecycle.start();
    this.lends.start();
    this.#models.listed.start();
    this.limiter.start();
    this.history.start();
    // Off the request path: until a file is hashed it is neither published nor served. A copy in
    // models_dir is not hashed here: only the record its verified fetch left vouches for it.
    void this.fileIndex.track(modelFilePaths(this.config.models));
    await this.budget.start();
    // Engines load in the background: the API answers (with 503 for their models) meanwhile.
    const models = this.slots.models();
    this.log.info(models.length ? `loading ${this.backends.length} backend(s) for ${models.join(', ')}` : 'serving no models (gateway)');
    await Promise.all(fresh.map((b) => b.start()));
  }

  async #startMesh(): Promise<void> {
    const side = await startMeshSide(this, {
      onMembers: () => this.#membersChanged(),
      onFatal: (message) => this.#onFatal(message),
      routed: (name, r) => this.#interest.routesTo(name, r),
      onReport: (name, r) => {
        this.forwards.prune((host) => this.poller?.get(host)?.polledAt);
        this.queues.pumpAll();
        this.#interest.hurry();
        this.#keySync.seen(name, r.report.key_digest);
      },
    });
    this.membership = side.membership;
    this.peerAgent = side.peerAgent;
    this.poller = side.poller;
    this.#membersChanged();
    this.poller.start();
  }

  #membersChanged(): void {
    pollMembers(this.members, this.poller);
    // A model split across members stops when a lender died or left; memory lent to a member that did comes back at once.
    this.#models.splits.membersChanged();
    for (const l of this.lends.list()) {
      const m = this.members.get(l.to);
      if (!m || m.state === 'dead' || m.state === 'left') this.lends.memberGone(l.to, m ? `is ${m.state}` : 'left the mesh');
    }
    this.queues.pumpAll();
  }

  /**
   * Apply a new, already validated config's model entries (SIGHUP): entries
   * that did not change keep their backends and slots; removed ones are
   * stopped, new ones started. Other keys need a restart, and say so.
   */
  async reload(next: Config): Promise<{ added: number; removed: number; restartNeeded: string[] }> {
    const restart = restartNeeded(this.config, next);
    await this.#models.listed.watch(next.models); // a new models: auto entry's endpoint is listed first
    const applied = this.#models.engines.apply(this.#models.listed.entries(), 'reload');
    const role = roleOf(this.config);
    this.config = reloaded(this.config, next);
    this.aliases.seed(next.aliases); // only names the table has never seen: a mesh change always wins
    if (roleOf(next) !== role) await this.membership?.ml.updateMeta().catch(() => {}); // role node ⇄ gateway
    const { removed, added } = await applied;
    this.#models.listed.adoptLoaded();
    return { added: added.length, removed: removed.length, restartNeeded: restart };
  }

  async stop(): Promise<void> {
    if (this.phase === 'stopped') return;
    this.phase = 'stopping';
    this.#stopping.abort();
    clearInterval(this.#tick);
    this.history.stop();
    this.lifecycle.stop();
    const lends = this.lends.stop();
    this.#models.listed.stop();
    this.budget.stop();
    this.limiter.stop();
    this.usage.save();
    this.keys.table.flush();
    // Hashing stops now; a fetched file's flush is waited for beside the rest of the stop, not before it.
    const files = this.fileIndex.stop();
    await this.poller?.stop();
    await this.membership?.stop().catch((err) => this.log.warn(`leaving the mesh: ${(err as Error).message}`));
    clearInterval(this.#saveTimer);
    this.perf.trySave((msg) => this.log.warn(msg));
    const server = this.#server;
    if (server) {
      await Promise.all([closeApi(server), ...this.backends.map((b) => b.stop()), this.lifecycle.settled()]);
      // A load that finished while stopping swapped its backends in: stop those too.
      await Promise.all(this.backends.map((b) => b.stop()));
      await this.peerAgent?.close().catch(() => {});
    } else {
      await Promise.all(this.backends.map((b) => b.stop()));
    }
    await files;
    await lends;
    this.#models.modelFiles.close();
    await this.tracing?.stop();
    this.metrics.stop();
    this.phase = 'stopped';
  }
}
