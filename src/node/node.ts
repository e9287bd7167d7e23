/**
 * One viiwork node: the assembly of config, engines, slots, queues, scores
 * and the HTTP API. Everything that decides lives in the rooms it imports;
 * this file only wires them and owns their lifetimes.
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
import { ReleaseWaits } from '../capacity/release-waits.ts';
import { buildReport, type CapacityReport } from '../capacity/report.ts';
import { readClientKeys } from '../config/keys.ts';
import { Keyring } from '../keys/access.ts';
import { KeyTable } from '../keys/table.ts';
import type { Limiter } from '../keys/limiter.ts';
import { UsageBook, type ServedRecord, type UsageRow } from '../keys/usage.ts';
import { limiterOver, meshUsage, recordUsage, settleServed } from './usage-side.ts';
import { findsNoMembers, type Config } from '../config/schema.ts';
import { DecisionFeed } from '../dispatch/decisions.ts';
import { TimelineBook, type TimelineDoc } from '../dispatch/timeline.ts';
import { fetchMemberTimeline } from '../api/timeline.ts';
import { Dispatcher } from '../dispatch/dispatcher.ts';
import { Loads } from '../dispatch/entry/load.ts';
import type { Reservation, RoutedRequest } from '../dispatch/types.ts';
import type { ServedUsage } from '../dispatch/ports.ts';
import type { Backend } from '../engines/backend.ts';
import { chooseSlot, TurnGaps } from '../route/slots.ts';
import { CacheBook } from '../engines/cache-book.ts';
import { hideFromEngines } from '../engines/llamacpp/llamacpp.ts';
import { SlotTable, type Lease } from '../engines/targets.ts';
import type { Workload } from '../workloads/workloads.ts';
import { FileIndex } from '../files/hash-index.ts';
import { ModelFilePolicy } from '../files/model-files.ts';
import { modelFilePaths } from '../files/paths.ts';
import { FileServer } from '../files/serve.ts';
import { NodeHistory } from '../history/node-history.ts';
import { tracingFor, type Tracing } from '../telemetry/tracing.ts';
import { ForwardBook } from '../forward/book.ts';
import { askMemberLoad, relayLifecycleAsk } from '../forward/lifecycle-ask.ts';
import type { PeerLink } from '../forward/send.ts';
import { bindProblem, isBindError } from '../http/listen.ts';
import { lifecycleReply, localLoadAsk, unknownMemberReply, type LifecycleReply } from '../lifecycle/answers.ts';
import { EntryBackends } from '../lifecycle/backends.ts';
import { ListedModels } from '../lifecycle/listed-models.ts';
import { MemoryBudget } from '../lifecycle/budget.ts';
import { reportLifecycleEvent } from '../lifecycle/events.ts';
import { Lifecycle, type LoadAnswer, type LoadReason, type UnloadAnswer } from '../lifecycle/lifecycle.ts';
import { createLog, type Log } from '../log.ts';
import { MemberTable } from '../mesh/members.ts';
import type { Membership } from '../mesh/membership.ts';
import { Metrics } from '../metrics/metrics.ts';
import { PerfScores } from '../perf/scores.ts';
import { QueueSet } from '../queue/fifo.ts';
import { SlotGate } from '../queue/gate.ts';
import { ReserveBook, trackedLease } from '../queue/reserve.ts';
import type { HostView } from '../route/types.ts';
import { memberHeaders } from '../security/headers.ts';
import { loadMeshMode, type MeshMode } from '../security/secret.ts';
import { EMPTY_BODY_SHA256 } from '../security/signing.ts';
import { VERSION } from '../version.ts';
import { keySyncOver, peerLink, pollMembers, startMeshSide } from './mesh-side.ts';
import type { KeySync } from '../keys/sync.ts';
import { dispatchPorts, reportSource } from './ports.ts';
import { OpenBodies } from '../http/open-bodies.ts';
import { aliasReach, localView, peerViews } from './views.ts';
import { bounded } from './bounded.ts';
import { Drain, WorkCount } from '../survive/drain.ts';
import { SlotStore } from '../survive/slot-store.ts';

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

/** The longest a start waits for its first join attempt, and for its engines' first health check. */
const WARM_JOIN_MS = 30_000;
const WARM_ENGINE_MS = 30_000;

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
  /** What this node sent its engines and what their caches are believed to hold (issue 17). */
  readonly turnGaps = new TurnGaps();
  /** The node chooses its slot-kind engines' slots (SPEC 9.6, "Slot choice") and learns turn gaps from them. */
  readonly cacheBook = new CacheBook({
    now: () => this.now(),
    choose: (slots) => chooseSlot(slots, this.turnGaps.chance),
    onGap: (ms) => this.turnGaps.observe(ms),
  });
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
  /** This node's backends by model entry (lifecycle/backends.ts). */
  readonly #engines: EntryBackends;
  /** The models each models: auto entry's endpoint lists (lifecycle/listed-models.ts). */
  readonly #listed: ListedModels;
  /** Which copy of a model file may be used, and fetching one (files/model-files.ts). */
  readonly #modelFiles: ModelFilePolicy;
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
  #rr = 0;
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
    this.queues = new QueueSet(config.routing.queue_max, config.routing.queue_timeout, this.now);
    this.perf = new PerfScores(config.node.state_dir, this.now);
    this.reserve = new ReserveBook(() => ({ slots: this.config.routing.interactive_reserve, forMs: this.config.routing.interactive_reserve_for }), this.now);
    this.gate = new SlotGate({
      lease: (m: string, w: Workload, k?: string) => this.slots.tryLease(m, w, k),
      now: this.now,
      reserve: {
        book: this.reserve,
        room: (m: string, w: Workload) => this.slots.roomFor(m, w, (slots) => this.reserve.held(m, slots)),
        track: (m: string, lease: Lease) => trackedLease(this.reserve, m, lease),
      },
    });
    this.metrics.lineDepthOf = () => this.slots.models().map((model) => ({ model, depth: this.gate.depth(model) }));
    // This node's own queue first, then the line: either way a slot goes to whoever ranks first (the gate asks both).
    this.slots.onRelease(() => (this.queues.pumpAll(), this.gate.pump()));
    this.#releaseWaits = new ReleaseWaits(this.slots);
    this.meshMode = loadMeshMode(opts.env ?? process.env, config.mesh.open);
    this.#onFatal =
      opts.onFatal ??
      ((message) => {
        this.log.error(message);
        void this.stop();
      });
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
      poller: () => this.poller,
      agent: () => this.peerAgent,
    });
    this.fileIndex = new FileIndex({ stateDir: config.node.state_dir, log: (msg) => this.log.info(msg) });
    this.files = new FileServer({
      self: this.name,
      mode: this.meshMode,
      members: this.members,
      byHash: (sha) => this.fileIndex.byHash(sha),
      rate: config.node.transfer_rate,
      log: (msg) => this.log.info(msg),
      onSent: (n) => this.metrics.fileTransferBytes.inc({ direction: 'sent' }, n),
    });
    this.#modelFiles = new ModelFilePolicy({
      modelsDir: config.node.models_dir,
      models: () => this.config.models,
      findsNoMembers: () => findsNoMembers(this.config),
      index: this.fileIndex,
      members: () => this.members.peers(),
      reportOf: (name) => this.poller?.get(name),
      load: (model, reason, detail) => this.lifecycle.load(model, reason, detail),
      headers: (s, p) => this.signForward('GET', p, EMPTY_BODY_SHA256, s.name),
      dispatcher: () => this.peerAgent,
      stopping: this.#stopping.signal,
      log: (msg) => this.log.info(msg),
      metrics: this.metrics,
    });
    this.#engines = new EntryBackends({
      slots: this.slots,
      pump: () => this.queues.pumpAll(),
      lifecycle: () => this.lifecycle,
      files: this.#modelFiles,
      stateDir: config.node.state_dir,
      log: this.log,
      metrics: this.metrics,
      keeper: new SlotStore({
        stateDir: config.node.state_dir,
        diskMiB: config.node.cache_disk,
        book: this.cacheBook,
        sha256Of: (p) => this.fileIndex.lookup(p)?.sha256,
        log: (line) => this.log.info(line),
      }),
    });
    this.#listed = new ListedModels({
      apply: (models, why) => this.#engines.apply(models, why),
      adopt: (model, detail) => void this.lifecycle.load(model, 'start', detail),
      maxName: config.api.max_model_name,
      log: this.log,
      env: opts.env,
      intervalMs: opts.listRefreshMs,
    });
    this.budget = new MemoryBudget(config.node.memory_budget, () => ({ pids: this.#engines.pids(), accounted: this.lifecycle.accounted() }));
    this.lifecycle = new Lifecycle({
      slots: this.slots,
      queued: (model) => this.queues.depth(model),
      budget: () => this.budget.bytes,
      create: (entry, infos) => this.#engines.createFor(entry, infos),
      swap: (old, next) => this.#engines.swap(old, next),
      onEvent: (e) => {
        reportLifecycleEvent(e, { node: this.name, log: this.log, metrics: this.metrics, feed: this.decisions });
        this.queues.pumpAll();
      },
      prepare: (entry, fetching) => this.#modelFiles.prepare(entry, fetching),
    });
    this.loads = new Loads({
      self: this.name,
      loadWaitMs: config.routing.load_wait,
      now: this.now,
      snapshot: () => this.hostViews(),
      askLocal: (model, reason, detail) => localLoadAsk(this.loadModel(model, reason, detail)),
      askRemote: (host, model, reason, detail) => askMemberLoad(this.#peers, host, model, reason, detail),
      log: (msg) => this.log.info(msg),
    });
    this.#interest = new PollInterest({
      self: this.name,
      windowMs: config.mesh.capacity_interest,
      now: this.now,
      localModels: () => this.slots.models(),
      forwards: this.forwards,
      decisions: this.decisions,
      waiting: () => this.queues.entries(),
      snapshot: () => this.hostViews(),
      apiOf: (host) => this.members.get(host)?.api,
      poller: () => this.poller,
    });
    this.history = new NodeHistory({
      self: this.name,
      now: this.now,
      hosts: () => this.hostViews(),
      queuedHere: (model) => this.queues.depth(model),
      membersAlive: () => 1 + this.members.peers().filter((m) => m.state === 'alive').length,
      refusedTotal: async () => (await this.metrics.forwards.get()).values.filter((v) => v.labels.outcome === 'refused').reduce((n, v) => n + v.value, 0),
      log: (msg) => this.log.warn(msg),
    });
    const t = config.telemetry;
    this.tracing = tracingFor(t, opts.env ?? process.env, { node: this.name, version: VERSION, log: (msg) => this.log.warn(msg), failed: () => this.metrics.otlpExportFailures.inc({}) });
    this.dispatcher = new Dispatcher(dispatchPorts(this, this.#peers, () => this.#interest.hurry()));
    const keys = readClientKeys(config.api, opts.env ?? process.env);
    if (keys.problems.length) throw new Error(keys.problems.map((p) => `${p.key}: ${p.message}; ${p.fix}`).join('\n'));
    this.openBodies = new OpenBodies(config.api.max_open_bodies);
    // A keys file seeds the table (names the mesh has never seen); the table kept in state_dir and the mesh win.
    this.keys = new Keyring(KeyTable.load(config.node.state_dir, { log: (msg) => this.log.warn(msg), now: this.now }), keys.keys);
    this.keys.table.seed(keys.table);
    this.#keySync = keySyncOver(this.keys.table, this.#peers, this.now);
    this.limiter = limiterOver(this.name, this.members, this.#peers, this.now, config.node.state_dir, (msg) => this.log.warn(msg));
    this.usage = UsageBook.load(this.name, this.now, config.node.state_dir, (msg) => this.log.warn(msg));
    this.#drain = new Drain({
      now: this.now,
      timeoutMs: config.node.drain_timeout,
      noticeMs: config.mesh.capacity_poll + config.routing.stale_after,
      members: () => this.members.peers().filter((m) => m.state === 'alive' && m.api).map((m) => m.name),
      busy: () => this.work.count,
      stop: () => this.stop().then(() => opts.onDrained?.()),
      log: (line) => this.log.info(line),
    });
    hideFromEngines(config.api.keys_env);
    for (const m of config.models) if (m.api_key_env) hideFromEngines(m.api_key_env);
  }

  /** Every backend of this node. */
  get backends(): readonly Backend[] {
    return this.#engines.list;
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
    const { host, port } = this.apiAddress;
    const h = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host;
    return `http://${h.includes(':') ? `[${h}]` : h}:${port}`;
  }

  loadModel(model: string, reason: LoadReason, detail: string): LoadAnswer {
    return this.lifecycle.load(model, reason, detail);
  }

  unloadModel(model: string, detail: string): UnloadAnswer {
    return this.lifecycle.unload(model, detail);
  }

  askMember(host: string, model: string, action: 'load' | 'unload', detail: string): Promise<LifecycleReply> {
    if (host === this.name) return Promise.resolve(lifecycleReply(this.name, model, action === 'load' ? this.loadModel(model, 'operator', detail) : this.unloadModel(model, detail)));
    if (!this.members.get(host)) return Promise.resolve(unknownMemberReply(host));
    return relayLifecycleAsk(this.#peers, host, model, action, detail);
  }

  placeModel(model: string, detail: string): Promise<{ host?: string; why: string }> {
    const workload = this.hostViews().flatMap((h) => h.models.get(model)?.targets ?? []).find((t) => t.onDemand)?.descriptor.workloads[0] ?? 'chat';
    return this.loads.place(model, workload, detail);
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
    return buildReport(reportSource(this, this.#modelFiles), held, member);
  }

  slotReleased(model: string, ms: number): Promise<void> {
    return this.#releaseWaits.released(model, ms);
  }

  aliasReach(version: number): { reached: number; members: number } {
    return aliasReach(version, this.aliases.version, this.members.peers(), this.poller);
  }

  keyReach(version: number): { reached: number; members: number } {
    return aliasReach(version, this.keys.table.version, this.members.peers(), this.poller, 'key_version');
  }

  /** The routing snapshot: this node now, and every alive or suspect peer from its last report. */
  hostViews(): HostView[] {
    const now = this.now();
    const files = this.#modelFiles;
    const self = localView(this.name, this.slots, this.perf, now, this.cacheBook, this.lifecycle, files, this.reserve);
    if (this.#drain.draining) self.draining = true;
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
    return meshUsage(this, this.#peers, this.members, sinceMs, key, byHour);
  }

  memberTimeline(host: string, id: string): Promise<TimelineDoc | { error: string }> {
    return fetchMemberTimeline(this.#peers, host, id);
  }

  nextRoundRobin(): number {
    return this.#rr++;
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
      const e = err as NodeJS.ErrnoException;
      if (isBindError(e)) throw new Error(`cannot bind gossip to ${this.config.mesh.advertise || 'the advertise address'}:${this.config.mesh.port} (mesh.advertise, mesh.port): ${bindProblem(e)}`);
      throw err;
    }

    await this.#listed.watch(this.config.models); // models: auto entries start with what their endpoints list
    const fresh = await this.#engines.startWith(this.#listed.entries());
    this.phase = 'running';
    void this.#warm(fresh).finally(() => {
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
      this.#loadForWaiting();
      this.#modelFiles.loadWaiting();
    }, 250);
    this.#tick.unref();
    this.#saveTimer = setInterval(() => (this.#savePerf(), this.usage.save()), 30_000);
    this.#saveTimer.unref();
    this.lifecycle.start();
    this.#listed.start();
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

  /** Requests waiting here: ask again for a model nobody holds; past scale_after, one more copy (SPEC section 11). */
  #loadForWaiting(): void {
    for (const q of this.queues.entries()) {
      if (q.depth === 0) continue;
      const since = this.queues.get(q.model, q.workload).queuedSince;
      if (since !== undefined) this.loads.waiting(q.model, q.workload, since, q.depth, this.config.routing.scale_after);
    }
  }

  /**
   * Ready means: the first join attempt (seeds and discovery) has finished,
   * one capacity round from every member alive after it has come back or
   * failed (at most three poll intervals), and every engine is healthy, dead
   * or past its first health check (at most WARM_ENGINE_MS).
   */
  async #warm(backends: readonly Backend[]): Promise<void> {
    await bounded(this.membership?.firstJoin() ?? Promise.resolve(), WARM_JOIN_MS);
    this.#membersChanged();
    await this.poller?.round(this.now(), 3 * this.config.mesh.capacity_poll);
    const unchecked = backends.filter((b) => !b.checked).map((b) => new Promise<void>((r) => b.once('checked', () => r())));
    await bounded(Promise.all(unchecked), WARM_ENGINE_MS);
  }

  async #startMesh(): Promise<void> {
    const side = await startMeshSide(
      {
        config: this.config,
        name: this.name,
        version: this.version,
        apiPort: () => this.apiAddress.port,
        role: () => (this.config.models.length ? 'node' : 'gateway'),
        mode: this.meshMode,
        members: this.members,
        aliases: this.aliases,
        keys: this.keys.table,
        log: this.log,
        onMembers: () => this.#membersChanged(),
        onFatal: (message) => this.#onFatal(message),
      },
      {
        intervalMs: this.config.mesh.capacity_poll,
        backgroundMs: this.config.mesh.capacity_background,
        routed: (name, r) => this.#interest.routesTo(name, r),
        now: this.now,
        log: (msg) => this.log.info(msg),
        onReport: (name, r) => {
          this.forwards.prune((host) => this.poller?.get(host)?.polledAt);
          this.queues.pumpAll();
          this.#interest.hurry();
          this.#keySync.seen(name, r.report.key_digest);
        },
      },
    );
    this.membership = side.membership;
    this.peerAgent = side.peerAgent;
    this.poller = side.poller;
    this.#membersChanged();
    this.poller.start();
  }

  #membersChanged(): void {
    pollMembers(this.members, this.poller);
    this.queues.pumpAll();
  }

  /**
   * Apply a new, already validated config's model entries (SIGHUP): entries
   * that did not change keep their backends and slots; removed ones are
   * stopped, new ones started. Other keys need a restart, and say so.
   */
  async reload(next: Config): Promise<{ added: number; removed: number; restartNeeded: string[] }> {
    const restartNeeded = (['node', 'api', 'mesh', 'routing', 'telemetry'] as const).filter((k) => JSON.stringify(next[k]) !== JSON.stringify(this.config[k]));
    await this.#listed.watch(next.models); // a new models: auto entry's endpoint is listed first
    const applied = this.#engines.apply(this.#listed.entries(), 'reload');
    const wasGateway = this.config.models.length === 0;
    this.config = { ...this.config, models: next.models, aliases: next.aliases };
    this.aliases.seed(next.aliases); // only names the table has never seen: a mesh change always wins
    if (wasGateway !== (next.models.length === 0)) await this.membership?.ml.updateMeta().catch(() => {}); // role node ⇄ gateway
    const { removed, added } = await applied;
    this.#listed.adoptLoaded();
    return { added: added.length, removed: removed.length, restartNeeded };
  }

  async stop(): Promise<void> {
    if (this.phase === 'stopped') return;
    this.phase = 'stopping';
    this.#stopping.abort();
    clearInterval(this.#tick);
    this.history.stop();
    this.lifecycle.stop();
    this.#listed.stop();
    this.budget.stop();
    this.limiter.stop();
    this.usage.save();
    this.keys.table.flush();
    // Hashing stops now; a fetched file's flush is waited for beside the rest of the stop, not before it.
    const files = this.fileIndex.stop();
    await this.poller?.stop();
    await this.membership?.stop().catch((err) => this.log.warn(`leaving the mesh: ${(err as Error).message}`));
    clearInterval(this.#saveTimer);
    this.#savePerf();
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
    this.#modelFiles.close();
    await this.tracing?.stop();
    this.metrics.stop();
    this.phase = 'stopped';
  }

  #savePerf(): void {
    try {
      this.perf.save();
    } catch (err) {
      this.log.warn(`cannot save performance baseline in ${this.config.node.state_dir}: ${(err as Error).message}`);
    }
  }
}
