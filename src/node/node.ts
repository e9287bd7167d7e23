/**
 * One viiwork node: the assembly of config, engines, slots, queues, scores
 * and the HTTP API. Everything that decides lives in the rooms it imports;
 * this file only wires them and owns their lifetimes.
 */
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { answerRawErrors, createApiHandler } from '../api/server.ts';
import { findsNoMembers, type Config } from '../config/schema.ts';
import type { Backend } from '../engines/backend.ts';
import { createBackendsFor, createEntryBackends, entryInfos, entryKey, configDescriptor } from '../engines/factory.ts';
import { MemoryBudget } from '../lifecycle/budget.ts';
import { bytesText, Lifecycle, type LifecycleEvent } from '../lifecycle/lifecycle.ts';
import { entryMemory } from '../lifecycle/memory.ts';
import { hideFromEngines } from '../engines/llamacpp.ts';
import { SlotTable } from '../engines/targets.ts';
import { tokenizerFor } from '../engines/tokenize.ts';
import { createLog, type Log } from '../log.ts';
import { Metrics } from '../metrics/metrics.ts';
import { PerfScores } from '../perf/scores.ts';
import { QueueSet } from '../queue/fifo.ts';
import { VERSION } from '../version.ts';
import type { Placement } from '../dispatch/types.ts';
import { Dispatcher } from '../dispatch/dispatcher.ts';
import type { DispatchPorts } from '../dispatch/ports.ts';
import type { PeerLink } from '../forward/send.ts';
import { askMemberLoad, relayLifecycleAsk } from '../forward/lifecycle-ask.ts';
import { lifecycleReply, localLoadAsk, unknownMemberReply, type LifecycleReply } from '../lifecycle/answers.ts';
import type { ApiNode, NodePhase } from '../api/ports.ts';
import type { RequestLimits } from '../api/request.ts';
import { ClientKeys } from '../api/client-keys.ts';
import { readClientKeys } from '../config/keys.ts';
import type { HeldDigests } from '../capacity/digest.ts';
import { buildReport, type CapacityReport } from '../capacity/report.ts';
import { CacheBook } from '../engines/cache-book.ts';
import { Agent } from 'undici';
import { Loads } from '../dispatch/load.ts';
import type { LoadAnswer, LoadReason, UnloadAnswer } from '../lifecycle/lifecycle.ts';
import { CapacityPoller } from '../capacity/poller.ts';
import { PollInterest } from '../capacity/interest.ts';
import { Membership } from '../mesh/membership.ts';
import { ForwardBook } from '../forward/book.ts';
import { MemberTable } from '../mesh/members.ts';
import type { HostView } from '../route/types.ts';
import { HEADER_NODE } from '../security/headers.ts';
import { loadMeshMode, type MeshMode } from '../security/secret.ts';
import { localView, peerViews } from './views.ts';
import { AliasTable } from '../aliases/table.ts';
import { DecisionFeed } from '../dispatch/decisions.ts';
import { FileIndex } from '../files/hash-index.ts';
import { FileServer } from '../files/serve.ts';
import { modelFilePaths } from '../files/paths.ts';
import { ModelFilePolicy } from '../files/model-files.ts';
import { EMPTY_BODY_SHA256 } from '../security/signing.ts';

export type { NodePhase };

export interface NodeOptions {
  log?: Log;
  now?: () => number;
  env?: NodeJS.ProcessEnv;
  /** Unrecoverable after start (another live node has our name). Default: log and stop. */
  onFatal?: (message: string) => void;
}

export class ViiworkNode implements ApiNode {
  readonly name: string;
  readonly log: Log;
  readonly metrics = new Metrics();
  readonly slots = new SlotTable();
  /** What this node sent its engines and what their caches are believed to hold (issue 17). */
  readonly cacheBook = new CacheBook();
  readonly queues: QueueSet<Placement>;
  readonly perf: PerfScores;
  readonly now: () => number;
  readonly version = VERSION;
  phase: NodePhase = 'starting';
  readonly meshMode: MeshMode;
  readonly members: MemberTable;
  readonly forwards: ForwardBook;
  /** Which members this node routes to and hurries (capacity/interest.ts). */
  readonly #interest: PollInterest;
  readonly aliases: AliasTable;
  readonly decisions = new DecisionFeed();
  poller: CapacityPoller | undefined;
  membership: Membership | undefined;
  readonly #onFatal: (message: string) => void;
  /** Connections to other nodes' APIs, leaving from the advertise address (made once it is known). */
  peerAgent!: Agent;
  #rr = 0;
  backends: Backend[] = [];
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
  /** Which copy of a model file may be used, and fetching one (files/model-files.ts). */
  readonly #modelFiles: ModelFilePolicy;
  #server: http.Server | undefined;
  /** Calls to members: forwards, load and unload asks. */
  readonly #peers: PeerLink;
  /** Aborted when the node stops: fetches in flight end, keeping their partial files. */
  readonly #stopping = new AbortController();
  #tick: NodeJS.Timeout | undefined;
  #saveTimer: NodeJS.Timeout | undefined;

  constructor(
    public config: Config,
    opts: NodeOptions = {},
  ) {
    this.name = config.node.name;
    this.log = opts.log ?? createLog(this.name);
    this.now = opts.now ?? Date.now;
    this.queues = new QueueSet(config.routing.queue_max, config.routing.queue_timeout, this.now);
    this.perf = new PerfScores(config.node.state_dir, this.now);
    this.slots.onRelease(() => this.queues.pumpAll());
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
    this.budget = new MemoryBudget(config.node.memory_budget, () => ({ pids: this.#enginePids(), accounted: this.lifecycle.accounted() }));
    this.lifecycle = new Lifecycle({
      slots: this.slots,
      queued: (model) => this.queues.depth(model),
      budget: () => this.budget.bytes,
      create: (entry, infos) => this.#wire(createBackendsFor(entry, infos, (msg, fields) => this.#engineLog(msg, fields), this.config.node.state_dir)),
      swap: (old, next) => this.#swap(old, next),
      onEvent: (e) => this.#lifecycleEvent(e),
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
    const node = this;
    this.#peers = {
      self: this.name,
      signsBody: this.meshMode.mode === 'secured',
      apiOf: (host) => this.members.get(host)?.api,
      responsive: (host) => {
        const report = this.poller?.get(host);
        return this.members.get(host)?.state === 'alive' && report !== undefined && this.now() - report.polledAt <= this.config.routing.stale_after;
      },
      sign: (method, pathWithQuery, bodySha256, to) => this.signForward(method, pathWithQuery, bodySha256, to),
      get dispatcher() {
        return node.peerAgent;
      },
    };
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
    this.dispatcher = new Dispatcher(this.#dispatchPorts());
    const keys = readClientKeys(config.api, opts.env ?? process.env);
    if (keys.problems.length) throw new Error(keys.problems.map((p) => `${p.key}: ${p.message}; ${p.fix}`).join('\n'));
    this.clientKeys = new ClientKeys(keys.keys);
    hideFromEngines(config.api.keys_env);
    for (const m of config.models) if (m.api_key_env) hideFromEngines(m.api_key_env);
  }

  /** Client keys (api.keys_env, api.keys_file); read once at start. */
  readonly clientKeys: ClientKeys;

  get apiPort(): number {
    return this.apiAddress.port;
  }

  get advertise(): string | undefined {
    return this.membership?.advertise;
  }

  /** api.* and routing.* need a restart to change (reload applies models and aliases only): read them once. */
  get requestLimits(): RequestLimits {
    return (this.#limits ??= { maxModelName: this.config.api.max_model_name, maxJsonDepth: this.config.api.max_json_depth });
  }

  #limits: RequestLimits | undefined;

  /** What the dispatcher may use of this node. */
  #dispatchPorts(): DispatchPorts {
    const peers = this.#peers;
    const r = this.config.routing;
    const api = this.config.api;
    return {
      name: this.name,
      // routing.* and api.* need a restart to change (reload applies models and aliases only).
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
      now: this.now,
      random: Math.random,
      nextRoundRobin: () => this.nextRoundRobin(),
      snapshot: () => this.hostViews(),
      warming: () => this.warming,
      waiting: () => this.#interest.hurry(),
      slots: this.slots,
      forwards: this.forwards,
      queues: this.queues,
      aliases: this.aliases,
      peers,
      recordScore: (model, tokens, ttft) => this.perf.record(model, tokens, ttft),
      tokenizer: (model) => tokenizerFor(this.backends, model),
      metrics: this.metrics,
      decisions: this.decisions,
      log: this.log,
      cache: this.cacheBook,
      loads: this.loads,
    };
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

  capacityReport(held?: HeldDigests): CapacityReport {
    const node = this;
    return buildReport(
      {
        lifecycle: this.lifecycle,
        name: this.name,
        version: this.version,
        now: this.now,
        slots: this.slots,
        perf: this.perf,
        queued: (model) => this.queues.depth(model),
        get aliasVersion() {
          return node.aliases.version;
        },
        cache: this.cacheBook,
        fileOf: (model) => this.#modelFiles.fileOf(model),
        fetchOf: (model) => this.#modelFiles.fetchOf(model),
      },
      held,
    );
  }

  #releaseWaiters = 0;

  /** Requests waiting here: ask again for a model nobody holds; past scale_after, one more copy (SPEC section 11). */
  #loadForWaiting(): void {
    for (const q of this.queues.entries()) {
      if (q.depth === 0) continue;
      const since = this.queues.get(q.model, q.workload).queuedSince;
      if (since !== undefined) this.loads.waiting(q.model, q.workload, since, q.depth, this.config.routing.scale_after);
    }
  }

  slotReleased(model: string, ms: number): Promise<void> {
    if (this.slots.hasFree(model) || !this.slots.models().includes(model) || this.#releaseWaiters >= MAX_RELEASE_WAITERS) return Promise.resolve();
    this.#releaseWaiters++;
    return new Promise((resolve) => {
      let settled = false;
      const done = () => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        off();
        this.#releaseWaiters--;
        resolve();
      };
      const timer = setTimeout(done, ms);
      // Any release: a released slot of another model answers too early, harmlessly (the report says what is free).
      const off = this.slots.onRelease(() => setImmediate(done));
    });
  }

  aliasReach(version: number): { reached: number; members: number } {
    let reached = this.aliases.version >= version ? 1 : 0;
    let members = 1;
    for (const m of this.members.peers()) {
      if (m.state !== 'alive') continue;
      members++;
      const v = this.poller?.get(m.name)?.report.alias_version;
      if (v !== undefined && v >= version) reached++;
    }
    return { reached, members };
  }

  /** The routing snapshot: this node now, and every alive or suspect peer from its last report. */
  hostViews(): HostView[] {
    const now = this.now();
    return [localView(this.name, this.slots, this.perf, now, this.cacheBook, this.lifecycle, (model) => this.#modelFiles.fileOf(model), (model) => this.#modelFiles.fetchOf(model)), ...peerViews(this.members.peers(), this.poller, this.config.routing.stale_after, now)];
  }

  nextRoundRobin(): number {
    return this.#rr++;
  }

  /** Headers that make a request a forward from this node: signed in a secured mesh, the name alone in an open one. */
  signForward(method: string, pathWithQuery: string, bodySha256: string, to: string): Record<string, string> {
    if (this.meshMode.mode === 'open') return { [HEADER_NODE]: this.name };
    return { ...this.meshMode.signer.sign({ method, pathWithQuery, node: this.name, to, bodySha256 }) };
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

  async start(): Promise<void> {
    fs.mkdirSync(this.config.node.state_dir, { recursive: true });
    const server = http.createServer(createApiHandler(this));
    answerRawErrors(server);
    server.keepAliveTimeout = 65_000;
    // A client has api.header_timeout to send its headers; a body that stops arriving is dropped by readBody (api.body_idle_timeout).
    server.headersTimeout = this.config.api.header_timeout;
    server.requestTimeout = 0;
    await new Promise<void>((resolve, reject) => {
      server.once('error', (err: NodeJS.ErrnoException) =>
        reject(new Error(`cannot listen on ${this.config.api.host}:${this.config.api.port} (api.host, api.port): ${bindProblem(err)}`)),
      );
      server.listen(this.config.api.port, this.config.api.host, () => resolve());
    });
    this.#server = server;
    this.log.info(`api listening on ${this.apiUrl}`);
    try {
      await this.#startMesh();
    } catch (err) {
      server.close();
      const e = err as NodeJS.ErrnoException;
      if (e.code === 'EADDRINUSE' || e.code === 'EADDRNOTAVAIL' || e.code === 'EACCES') {
        throw new Error(`cannot bind gossip to ${this.config.mesh.advertise || 'the advertise address'}:${this.config.mesh.port} (mesh.advertise, mesh.port): ${bindProblem(e)}`);
      }
      throw err;
    }

    const fresh = await this.#createBackends(this.config.models);
    this.backends = fresh;
    this.slots.setBackends(this.backends);
    this.phase = 'running';
    void this.#warm(fresh).finally(() => {
      this.#warmUp = undefined;
      this.#ready();
      this.log.info('ready: joined, reports in, engines checked');
      this.queues.pumpAll();
    });
    this.#tick = setInterval(() => {
      this.queues.pumpAll();
      this.#interest.hurry();
      this.#interest.noteAsked();
      this.#loadForWaiting();
      this.#modelFiles.loadWaiting();
    }, 250);
    this.#tick.unref();
    this.#saveTimer = setInterval(() => this.#savePerf(), 30_000);
    this.#saveTimer.unref();
    this.lifecycle.start();
    // Off the request path: until a file is hashed it is neither published nor served. A copy in
    // models_dir is not hashed here: only the record its verified fetch left vouches for it.
    void this.fileIndex.track(modelFilePaths(this.config.models));
    await this.budget.start();
    // Engines load in the background: the API answers (with 503 for their models) meanwhile.
    const models = this.slots.models();
    this.log.info(models.length ? `loading ${this.backends.length} backend(s) for ${models.join(', ')}` : 'serving no models (gateway)');
    await Promise.all(fresh.map((b) => b.start()));
  }

  /** Set while the node is starting (SPEC section 4): /health says `starting`, unknown models wait for it. */
  #ready!: () => void;
  #warmUp: Promise<void> | undefined = new Promise<void>((resolve) => (this.#ready = resolve));

  /** undefined once the node is ready; while it starts, resolves when it is. */
  get warming(): Promise<void> | undefined {
    return this.#warmUp;
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
    const membership = await Membership.start({
      config: this.config,
      name: this.name,
      version: this.version,
      apiPort: () => this.apiAddress.port,
      role: () => (this.config.models.length ? 'node' : 'gateway'),
      mode: this.meshMode,
      members: this.members,
      aliases: this.aliases,
      log: this.log,
      onMembers: () => this.#membersChanged(),
      onFatal: (message) => this.#onFatal(message),
    });
    this.membership = membership;
    this.peerAgent = new Agent({
      keepAliveTimeout: 30_000,
      headersTimeout: 15 * 60_000,
      bodyTimeout: 15 * 60_000,
      connect: { timeout: 2000 },
      localAddress: membership.advertise,
    });
    this.poller = new CapacityPoller({
      intervalMs: this.config.mesh.capacity_poll,
      backgroundMs: this.config.mesh.capacity_background,
      routed: (name, r) => this.#interest.routesTo(name, r),
      localAddress: membership.advertise,
      now: this.now,
      log: (msg) => this.log.info(msg),
      onReport: () => {
        this.forwards.prune((host) => this.poller?.get(host)?.polledAt);
        this.queues.pumpAll();
        this.#interest.hurry();
      },
    });
    this.#membersChanged();
    this.poller.start();
  }

  #membersChanged(): void {
    const peers = this.members.peers();
    this.poller?.setTargets(peers.filter((m) => m.state === 'alive' && m.api).map((m) => ({ name: m.name, api: m.api! })));
    for (const m of this.members.list()) if ((m.state === 'dead' || m.state === 'left') && !m.self) this.poller?.forget(m.name);
    this.queues.pumpAll();
  }

  /** Backends by model entry, so a reload replaces only what changed. */
  readonly #byEntry = new Map<string, Backend[]>();

  async #createBackends(entries: Config['models']): Promise<Backend[]> {
    const taken = new Set(this.backends.map((b) => b.id));
    const out: Backend[] = [];
    for (const m of entries) {
      const key = entryKey(m);
      let memory = 0;
      try {
        // A file fetched earlier is measured where it is (SPEC section 11).
        memory = await entryMemory(this.#modelFiles.measured(m));
      } catch (err) {
        this.log.warn(`${(err as Error).message}; counting it as 0 bytes`);
      }
      // An always entry whose file is not here: its verified copy, else fetched from a member first (SPEC section 11).
      const always = m.load === 'always' ? this.#modelFiles.alwaysFile(m) : { kind: 'here' as const, entry: m };
      // An on-demand entry starts as placeholders (its target listed with 0 slots); the lifecycle loads it when asked.
      const made =
        m.load === 'on_demand' || always.kind === 'fetch'
          ? Lifecycle.placeholders(entryInfos(m, taken), configDescriptor(m))
          : await this.#wire(createEntryBackends(always.entry, taken, (msg, fields) => this.#engineLog(msg, fields), this.config.node.state_dir));
      this.lifecycle.add(m, made, memory, { fetchFirst: always.kind === 'fetch' });
      if (m.load === 'on_demand') this.log.info(`${m.name}: on demand, ${bytesText(memory * made.length)} when loaded`);
      if (always.kind === 'fetch') {
        this.#modelFiles.awaitFile(m.name);
        this.log.info(`${m.name}: ${'path' in m ? m.path : ''} is not here; it loads once it is fetched from a member that has it`);
      }
      this.#byEntry.set(key, [...(this.#byEntry.get(key) ?? []), ...made]);
      out.push(...made);
    }
    return out;
  }

  /** The node's events on real backends: queues wake on state changes, descriptors regroup targets, restarts count. */
  async #wire(made: Promise<Backend[]>): Promise<Backend[]> {
    const list = await made;
    for (const b of list) {
      b.on('state', () => {
        this.queues.pumpAll();
        // A poll held open for a free slot (?wait=) answers when a backend comes up too: an on-demand load's end
        // reaches the entry that waits for it at once, not at its next poll.
        this.slots.changed();
      });
      b.on('descriptor', () => this.slots.setBackends(this.backends));
      b.on('restart', () => this.metrics.engineRestarts.inc({ model: b.info.model }));
    }
    return list;
  }

  /** The lifecycle replaced an entry's backends (loaded, unloaded): the node's lists and slot table follow. */
  #swap(old: readonly Backend[], next: readonly Backend[]): void {
    const swapIn = (list: Backend[]) => {
      const out = list.filter((b) => !old.includes(b));
      const at = list.findIndex((b) => old.includes(b));
      out.splice(at < 0 ? out.length : at, 0, ...next);
      return out;
    };
    this.backends = swapIn(this.backends);
    for (const [key, list] of this.#byEntry) if (list.some((b) => old.includes(b))) this.#byEntry.set(key, swapIn(list));
    this.slots.setBackends(this.backends);
    this.queues.pumpAll();
    this.slots.changed();
  }

  /** Pids of this node's engine processes (memory_budget: auto does not count their GPU use as others'). */
  #enginePids(): Set<number> {
    const pids = new Set<number>();
    for (const b of this.backends) {
      const pid = (b as { pid?: number }).pid;
      if (typeof pid === 'number') pids.add(pid);
    }
    return pids;
  }

  /** One log line, one feed entry and the metrics for each load and unload, saying why. */
  #lifecycleEvent(e: LifecycleEvent): void {
    const line = {
      loading: `loading ${e.model} (${e.reason}): ${e.detail}`,
      loaded: `loaded ${e.model} (${e.reason}): ${e.detail}`,
      'load-failed': `load of ${e.model} failed: ${e.detail}`,
      refused: `refused to load ${e.model}: ${e.detail}`,
      unloading: `unloading ${e.model} (${e.reason}): ${e.detail}`,
      unloaded: `unloaded ${e.model} (${e.reason})`,
    }[e.kind];
    if (e.kind === 'load-failed' || e.kind === 'refused') this.log.warn(line);
    else this.log.info(line);
    if (e.kind === 'loaded') this.metrics.modelLoads.inc({ model: e.model, reason: e.reason });
    if (e.kind === 'unloaded') this.metrics.modelUnloads.inc({ model: e.model, reason: e.reason });
    if (e.kind === 'load-failed') this.metrics.modelUnloads.inc({ model: e.model, reason: 'failed' });
    if (e.kind === 'loading' || e.kind === 'unloading' || e.kind === 'load-failed' || e.kind === 'refused' || e.kind === 'loaded') {
      this.decisions.add({
        at: Date.now(),
        entry: this.name,
        executor: this.name,
        model: e.model,
        workload: '-',
        route: e.kind === 'unloading' ? 'unload' : 'load',
        queued_ms: 0,
        ttft_ms: null,
        outcome: e.kind,
        lifecycle: { event: e.kind, reason: e.reason, detail: e.detail.slice(0, 512) },
      });
    }
    this.queues.pumpAll();
  }

  /**
   * Engine output (`[model/idx] …`) is shown while the engine loads or fails,
   * where it explains what is going on; once it serves, llama-server prints
   * a line per request, so those lines are debug (VIIWORK_DEBUG=1).
   */
  #engineLog(msg: string, fields?: Record<string, unknown>): void {
    if (!fields?.engine_output) return this.log.info(msg);
    const b = this.backends.find((x) => x.id === fields.backend);
    if (b && b.state === 'healthy') this.log.debug(msg);
    else this.log.info(msg);
  }

  /**
   * Apply a new, already validated config's model entries (SIGHUP): entries
   * that did not change keep their backends and slots; removed ones are
   * stopped, new ones started. Other keys need a restart, and say so.
   */
  async reload(next: Config): Promise<{ added: number; removed: number; restartNeeded: string[] }> {
    const restartNeeded = (['node', 'api', 'mesh', 'routing'] as const).filter((k) => JSON.stringify(next[k]) !== JSON.stringify(this.config[k]));
    const wanted = new Map<string, number>();
    for (const m of next.models) wanted.set(entryKey(m), (wanted.get(entryKey(m)) ?? 0) + 1);
    const removed: Backend[] = [];
    for (const [key, list] of this.#byEntry) {
      if (!wanted.has(key)) {
        removed.push(...list);
        this.#byEntry.delete(key);
      }
    }
    const have = new Set(this.#byEntry.keys());
    const addedEntries = next.models.filter((m) => !have.has(entryKey(m)));
    this.backends = this.backends.filter((b) => !removed.includes(b));
    this.lifecycle.remove(removed);
    for (const m of addedEntries) if (m.api_key_env) hideFromEngines(m.api_key_env);
    const added = await this.#createBackends(addedEntries);
    this.backends = [...this.backends, ...added];
    this.slots.setBackends(this.backends);
    const wasGateway = this.config.models.length === 0;
    this.config = { ...this.config, models: next.models, aliases: next.aliases };
    this.aliases.seed(next.aliases); // only names the table has never seen: a mesh change always wins
    if (wasGateway !== (next.models.length === 0)) await this.membership?.ml.updateMeta().catch(() => {}); // role node ⇄ gateway
    for (const b of removed) this.log.info(`reload: stopping ${b.id}`);
    for (const b of added) this.log.info(`reload: starting ${b.id}`);
    await Promise.all([...removed.map((b) => b.stop()), ...added.map((b) => b.start())]);
    this.queues.pumpAll();
    return { added: added.length, removed: removed.length, restartNeeded };
  }

  async stop(): Promise<void> {
    if (this.phase === 'stopped') return;
    this.phase = 'stopping';
    this.#stopping.abort();
    clearInterval(this.#tick);
    this.lifecycle.stop();
    this.budget.stop();
    // Hashing stops now; a fetched file's flush is waited for beside the rest of the stop, not before it.
    const files = this.fileIndex.stop();
    await this.poller?.stop();
    await this.membership?.stop().catch((err) => this.log.warn(`leaving the mesh: ${(err as Error).message}`));
    clearInterval(this.#saveTimer);
    this.#savePerf();
    const server = this.#server;
    if (server) {
      server.closeIdleConnections();
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      setTimeout(() => server.closeAllConnections(), 2000).unref();
      await Promise.all([closed, ...this.backends.map((b) => b.stop()), this.lifecycle.settled()]);
      // A load that finished while stopping swapped its backends in: stop those too.
      await Promise.all(this.backends.map((b) => b.stop()));
      await this.peerAgent?.close().catch(() => {});
    } else {
      await Promise.all(this.backends.map((b) => b.stop()));
    }
    await files;
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

/** Capacity polls held open at once waiting for a slot to free (GET /v1/capacity?wait=). */
const MAX_RELEASE_WAITERS = 512;

/** The longest a start waits for its first join attempt, and for its engines' first health check. */
const WARM_JOIN_MS = 30_000;
const WARM_ENGINE_MS = 30_000;

function bounded(p: Promise<unknown>, ms: number): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    t.unref();
    void p.then(
      () => (clearTimeout(t), resolve()),
      () => (clearTimeout(t), resolve()),
    );
  });
}

/** What a failed bind means, in words an operator can act on. */
function bindProblem(err: NodeJS.ErrnoException): string {
  switch (err.code) {
    case 'EADDRINUSE':
      return 'the address is already in use (is another viiwork or another program running there?)';
    case 'EADDRNOTAVAIL':
      return 'this machine has no such address';
    case 'EACCES':
      return 'permission denied (ports below 1024 need privileges)';
    default:
      return err.message;
  }
}
