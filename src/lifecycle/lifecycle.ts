/**
 * The life of this node's model entries (SPEC section 11): an `always` entry
 * is loaded at start and kept; an `on_demand` entry moves unloaded → loading
 * → loaded → unloading → unloaded. Loads go through one lock (one at a
 * time), making room first by unloading the least recently used idle
 * on-demand entries; an entry with a request in flight or queued is never
 * idle, and an `always` entry is never unloaded. The node's memory budget
 * is never oversold: `used` counts every backend loading (once its room is
 * free), loaded or unloading.
 *
 * The choice of what to unload is a pure function (`planRoom`); this class
 * does the moves, and the node supplies creation of real backends and the
 * swap of backends in its slot table (`LifecyclePorts`).
 */
import type { ModelConfig } from '../config/schema.ts';
import { UnloadedBackend, type Backend, type BackendInfo } from '../engines/backend.ts';
import { LoadLock } from '../engines/load-lock.ts';
import type { SlotTable } from '../engines/targets.ts';

/** `fetching`: the entry's file is being fetched from a member before it loads (issue 20, `prepare` below). */
export type LifeState = 'unloaded' | 'fetching' | 'loading' | 'loaded' | 'unloading';
export type LoadReason = 'start' | 'request' | 'scale' | 'operator';
/** `endpoint`: a many-model endpoint unloaded the model by itself (engines/many/router-model.ts). */
/** `lender`: a model split across members lost a part (a lender died, left or stopped lending). */
export type UnloadReason = 'idle' | 'room' | 'operator' | 'failed' | 'stop' | 'endpoint' | 'lender';

/** One member's part of a model split across members (SPEC section 11, a model bigger than one host). */
export interface HeldPart {
  member: string;
  bytes: number;
}

/** A split plan as the lifecycle uses it: the bytes held here, and every part. */
export type SplitChoice = { kind: 'split'; here: number; parts: HeldPart[]; detail: string } | { kind: 'none'; why: string };

/** One load or unload, for the log, the decision feed and the metrics. */
export interface LifecycleEvent {
  kind: 'loaded' | 'unloaded' | 'load-failed' | 'refused' | 'loading' | 'unloading';
  model: string;
  reason: LoadReason | UnloadReason | 'memory';
  /** Why in words: which request or operator asked, which model was unloaded for which. */
  detail: string;
  /** A model split across members: which member holds which part (SPEC section 11). */
  parts?: HeldPart[];
}

export type LoadAnswer =
  | { kind: 'loaded' | 'loading'; model: string }
  | { kind: 'unloading'; model: string }
  | { kind: 'refused'; model: string; need: number; budget: number; free: number; freeable: number }
  | { kind: 'unknown'; model: string };

export type UnloadAnswer = { kind: 'unloading' | 'unloaded'; model: string } | { kind: 'busy'; model: string } | { kind: 'always'; model: string } | { kind: 'unknown'; model: string };

export interface MemoryFigures {
  budget: number;
  used: number;
  free: number;
  /** Of `used`, the bytes lent to members (SPEC section 11, a model bigger than one host); absent: none. */
  lent?: number;
}

/** An idle loaded on-demand entry that could be unloaded for room. */
export interface IdleEntry {
  id: number;
  bytes: number;
  /** performance.now() since when it has served nothing. */
  idleSince: number;
}

/**
 * What to unload so `need` bytes fit: nothing when they fit in free memory;
 * else the least recently used idle entries, oldest first, until they fit;
 * undefined when even unloading every idle entry is not enough.
 */
export function planRoom(budget: number, reserved: number, need: number, idle: readonly IdleEntry[]): number[] | undefined {
  let free = budget - reserved;
  if (need <= free) return [];
  const victims: number[] = [];
  for (const e of [...idle].sort((a, b) => a.idleSince - b.idleSince || a.id - b.id)) {
    victims.push(e.id);
    free += e.bytes;
    if (need <= free) return victims;
  }
  return undefined;
}

export interface LifecyclePorts {
  readonly slots: SlotTable;
  /** Requests waiting in this node's queues for a model. */
  queued(model: string): number;
  /** The node's budget in bytes now (auto re-reads it). */
  budget(): number;
  /** Real backends for an entry, with these ids (wired to the node's events), not yet started. */
  create(entry: ModelConfig, infos: readonly BackendInfo[]): Promise<Backend[]>;
  /** Replace `old` by `next` in the node's backends and slot table. */
  swap(old: readonly Backend[], next: readonly Backend[]): void;
  onEvent(e: LifecycleEvent): void;
  /**
   * Before a load: the entry as it is to be loaded (its file fetched from a
   * member when it is not here; SPEC section 11). Calls `fetching()` when it
   * must fetch, so the entry reports `fetching` meanwhile. Rejects: the load fails with its message.
   */
  prepare?(entry: ModelConfig, fetching: () => void): Promise<ModelConfig>;
  /** performance.now(), injectable for tests. */
  now?(): number;
  /** Bytes this node lends to members now (split/lends.ts): used, as its own backends' are. */
  lent?(): number;
  /** In [0, 1): spreads the retries of always split entries (two members each placing one must not retry in step). */
  random?(): number;
  /**
   * A model bigger than this node (an entry with `split`): where its parts would go with this node as runner
   * (`free`: bytes free here), and its backends made over those parts (lends asked, tunnels open). Absent: no split.
   */
  split?: {
    plan(entry: ModelConfig, need: number, free: number): SplitChoice;
    create(entry: ModelConfig, infos: readonly BackendInfo[], parts: readonly HeldPart[]): Promise<Backend[]>;
  };
}

/** The entry's `split` setting when it has one (llamacpp entries only). */
export function splitOf(entry: ModelConfig): 'auto' | readonly string[] | undefined {
  return entry.engine === 'llamacpp' && entry.split !== false ? entry.split : undefined;
}

/** How soon an always split entry that could not be placed is tried again. */
export const SPLIT_RETRY_MS = 5000;

interface Managed {
  readonly id: number;
  readonly entry: ModelConfig;
  readonly onDemand: boolean;
  /**
   * An `always` entry whose file must first be fetched from a member (SPEC
   * section 11, "at start for always entries"): it starts unloaded, its load
   * is this lifecycle's as an on-demand one's is, and once loaded it is kept
   * as an always entry is (never unloaded for idleness, room or an operator).
   */
  readonly fetchFirst: boolean;
  /** Bytes this entry's backends need together (memory × replicas). */
  need: number;
  /** Of `need`, the bytes held on this node while it loads or runs: all of it, or its own part when split. */
  holding: number;
  /** The parts of a split model while it is loading or loaded split (SPEC section 11); undefined: whole here. */
  parts?: HeldPart[];
  /** An always entry with `split`: loaded by this lifecycle, placed again whenever it is stopped. */
  readonly keepPlaced: boolean;
  /** performance.now() before which a keepPlaced entry is not tried again. */
  retryAt: number;
  /** The last refusal said of a keepPlaced entry (said once, not every retry). */
  lastWhy?: string;
  state: LifeState;
  /** A loading entry whose victims have stopped: its memory is in use. */
  roomReady: boolean;
  backends: Backend[];
  readonly infos: BackendInfo[];
  loadedAt: number;
  /** The last failed load's engine text. */
  error?: string;
  loading?: Promise<void>;
  stopping?: Promise<void>;
}

/** The entry's load is this lifecycle's (on demand, or an always entry fetched first): its state is kept here, not read from backends. */
function ownsLoad(m: Managed): boolean {
  return m.onDemand || m.fetchFirst || m.keepPlaced;
}

/** A model loaded this recently that has served nothing yet is not unloaded for room (see #evictable). */
export const LOAD_GRACE_MS = 10_000;

/** How often idle entries are looked at (their idle_unload is counted from their last request). */
export const IDLE_SWEEP_MS = 500;

/** A target's state is that of its entries, the first of these that any of them is in (else unloaded). */
const STATE_RANK: readonly LifeState[] = ['loaded', 'loading', 'fetching', 'unloading'];

/** A split entry as its target reports it: who may lend, and the parts while it runs split. */
export interface TargetSplit {
  allowed: 'auto' | readonly string[];
  parts?: HeldPart[];
}

export class Lifecycle {
  readonly #entries: Managed[] = [];
  readonly #lock = new LoadLock();
  #nextId = 0;
  #timer: NodeJS.Timeout | undefined;
  readonly #now: () => number;

  constructor(private readonly p: LifecyclePorts) {
    this.#now = p.now ?? (() => performance.now());
  }

  /**
   * Take an entry in. `backends` are its real backends (always) or
   * placeholders (on_demand, made with `placeholders`). `memory` is bytes per backend.
   */
  add(entry: ModelConfig, backends: Backend[], memory: number, opts: { fetchFirst?: boolean } = {}): void {
    const onDemand = entry.load === 'on_demand';
    const fetchFirst = !onDemand && opts.fetchFirst === true;
    // An always entry bigger than one host may need lenders, which this node learns of from their reports: it starts unloaded.
    const keepPlaced = !onDemand && !fetchFirst && splitOf(entry) !== undefined;
    const owned = onDemand || fetchFirst || keepPlaced;
    this.#entries.push({
      id: this.#nextId++,
      entry,
      onDemand,
      fetchFirst,
      keepPlaced,
      retryAt: 0,
      need: memory * backends.length,
      holding: memory * backends.length,
      state: owned ? 'unloaded' : 'loading',
      roomReady: !owned,
      backends,
      infos: backends.map((b) => b.info),
      loadedAt: this.#now(),
    });
  }

  /** Forget the entries holding these backends (removed by a reload; the node stops them). */
  remove(backends: readonly Backend[]): void {
    for (let i = this.#entries.length - 1; i >= 0; i--) if (this.#entries[i].backends.some((b) => backends.includes(b))) this.#entries.splice(i, 1);
  }

  /** Placeholders for an on-demand entry's backends: its target stays listed with 0 slots. */
  static placeholders(infos: readonly BackendInfo[], descriptor: Backend['descriptor'], why?: string): Backend[] {
    return infos.map((info) => new UnloadedBackend(info, descriptor, why));
  }

  start(): void {
    this.#timer = setInterval(() => this.sweep(), IDLE_SWEEP_MS);
    this.#timer.unref();
  }

  #stopped = false;

  /** No more loads or sweeps (the node is stopping); loads under way stop what they started. */
  stop(): void {
    this.#stopped = true;
    clearInterval(this.#timer);
  }

  /** An always entry's state follows its backends; one this lifecycle loads (ownsLoad) keeps its own. */
  #state(m: Managed): LifeState {
    if (ownsLoad(m)) return m.state;
    return m.backends.some((b) => b.state === 'starting') ? 'loading' : 'loaded';
  }

  /** The entry that holds this backend, if any. */
  #of(b: Backend): Managed | undefined {
    return this.#entries.find((m) => m.backends.includes(b));
  }

  /** State and bytes of one target (the entries whose backends it groups). */
  targetState(backends: readonly Backend[]): { state: LifeState; memory: number; onDemand: boolean; error?: string; split?: TargetSplit } {
    // Read for every local target on every routing decision: one pass, no intermediate arrays.
    let rank: number = STATE_RANK.length;
    let memory = 0;
    let onDemand = false;
    let error: string | undefined;
    let split: TargetSplit | undefined;
    const seen: Managed[] = [];
    for (const b of backends) {
      const m = this.#of(b);
      if (m === undefined || seen.includes(m)) continue;
      seen.push(m);
      const r = STATE_RANK.indexOf(this.#state(m));
      if (r >= 0 && r < rank) rank = r;
      if (m.need > memory) memory = m.need;
      if (m.onDemand) onDemand = true;
      if (error === undefined && m.error !== undefined) error = m.error;
      const allowed = splitOf(m.entry);
      if (allowed !== undefined && split === undefined) split = m.parts ? { allowed, parts: m.parts } : { allowed };
    }
    const state: LifeState = rank < STATE_RANK.length ? STATE_RANK[rank] : 'unloaded';
    const out: { state: LifeState; memory: number; onDemand: boolean; error?: string; split?: TargetSplit } = { state, memory, onDemand };
    if (error !== undefined && state === 'unloaded') out.error = error;
    if (split) out.split = split;
    return out;
  }

  /** Bytes reserved: every entry loading, loaded or unloading (the figure loads are planned against). */
  #reserved(): number {
    return this.#entries.reduce((n, m) => n + (this.#state(m) === 'unloaded' ? 0 : m.holding), this.p.lent?.() ?? 0);
  }

  memory(): MemoryFigures {
    const budget = this.p.budget();
    const lent = this.p.lent?.() ?? 0;
    let used = lent;
    for (const m of this.#entries) {
      const s = this.#state(m);
      if (s === 'loaded' || s === 'unloading' || (s === 'loading' && m.roomReady)) used += m.holding;
    }
    return { budget, used, free: Math.max(0, budget - used), ...(lent > 0 ? { lent } : {}) };
  }

  /** Bytes this node's own backends account for (memory_budget: auto does not count them as others' use). */
  accounted(): number {
    return this.memory().used;
  }

  #busy(m: Managed): number {
    return m.backends.reduce((n, b) => n + this.p.slots.busyOf(b), 0);
  }

  #idle(m: Managed): boolean {
    return m.onDemand && m.state === 'loaded' && this.#busy(m) === 0 && this.p.queued(m.entry.name) === 0;
  }

  /**
   * Idle and may be unloaded for room: a model loaded for requests that have
   * not reached it yet (their entry nodes learn of the load at their next
   * poll) is kept for LOAD_GRACE_MS, so two loads do not evict each other.
   */
  #evictable(m: Managed): boolean {
    if (!this.#idle(m)) return false;
    const served = m.backends.some((b) => (this.p.slots.lastUsedOf(b) ?? -Infinity) >= m.loadedAt);
    return served || this.#now() - m.loadedAt >= LOAD_GRACE_MS;
  }

  #idleSince(m: Managed): number {
    let t = m.loadedAt;
    for (const b of m.backends) t = Math.max(t, this.p.slots.lastUsedOf(b) ?? 0);
    return t;
  }

  /** Model names with an on-demand entry here, and whether each is loaded. */
  onDemandModels(): { model: string; state: LifeState; need: number; idle: boolean }[] {
    return this.#entries.filter((m) => m.onDemand).map((m) => ({ model: m.entry.name, state: m.state, need: m.need, idle: this.#idle(m) }));
  }

  /**
   * Load one on-demand entry of `model` (SPEC section 11): at once an answer
   * (already loaded or loading: the same load; refused: it cannot fit even
   * after unloading every idle on-demand entry), the load itself going on
   * behind the lock.
   */
  load(model: string, reason: LoadReason, detail: string): LoadAnswer {
    const mine = this.#entries.filter((m) => m.entry.name === model);
    if (mine.length === 0) return { kind: 'unknown', model };
    const active = mine.find((m) => ['loaded', 'loading', 'fetching'].includes(this.#state(m)));
    if (active) return { kind: this.#state(active) === 'loaded' ? 'loaded' : 'loading', model };
    const cand = mine.find((m) => ownsLoad(m) && m.state === 'unloaded');
    if (!cand || this.#stopped) return { kind: 'unloading', model };
    const budget = this.p.budget();
    const reserved = this.#reserved();
    // A split entry frees only its own part here when it is unloaded.
    const idle = this.#entries.filter((m) => this.#evictable(m)).map((m) => ({ id: m.id, bytes: m.holding, idleSince: this.#idleSince(m) }));
    let plan = planRoom(budget, reserved, cand.need, idle);
    // Bigger than this node even after unloading idle models: across members, when the entry allows it (SPEC section 11).
    let split: SplitChoice | undefined;
    if (!plan && splitOf(cand.entry) !== undefined && this.p.split) {
      split = this.p.split.plan(cand.entry, cand.need, Math.max(0, budget - reserved));
      if (split.kind === 'split') plan = [];
    }
    if (!plan) {
      const freeable = idle.reduce((n, e) => n + e.bytes, 0);
      const text = `needs ${bytesText(cand.need)}, ${bytesText(Math.max(0, budget - reserved))} free of ${bytesText(budget)} and ${bytesText(freeable)} idle${split?.kind === 'none' ? `; no split: ${split.why}` : ''}`;
      // An always split entry is tried again every few seconds: its refusal is said when it changes, not each time.
      if (!cand.keepPlaced || cand.lastWhy !== text) this.p.onEvent({ kind: 'refused', model, reason: 'memory', detail: text });
      cand.lastWhy = text;
      return { kind: 'refused', model, need: cand.need, budget, free: Math.max(0, budget - reserved), freeable };
    }
    cand.lastWhy = undefined;
    const parts = split?.kind === 'split' ? split.parts : undefined;
    cand.holding = split?.kind === 'split' ? split.here : cand.need;
    cand.parts = parts;
    if (split?.kind === 'split') detail = `${detail}; ${split.detail}`;
    const victims = plan.map((id) => this.#entries.find((m) => m.id === id)!);
    const stopping = victims.map((v) => this.#unload(v, 'room', `room for ${model} (${detail})`));
    cand.state = 'loading';
    cand.roomReady = victims.length === 0;
    cand.error = undefined;
    for (const b of cand.backends) if (b instanceof UnloadedBackend) b.pending(`loading (${reason}: ${detail})`);
    const why = victims.length ? `${detail}; unloading ${victims.map((v) => v.entry.name).join(', ')} for room` : detail;
    this.p.onEvent({ kind: 'loading', model, reason, detail: why });
    cand.loading = this.#run(cand, stopping, reason, why, parts).finally(() => (cand.loading = undefined));
    return { kind: 'loading', model };
  }

  async #run(m: Managed, stopping: Promise<void>[], reason: LoadReason, why: string, parts?: HeldPart[]): Promise<void> {
    const release = await this.#lock.acquire(m.entry.name);
    try {
      await Promise.all(stopping);
      m.roomReady = true;
      let real: Backend[];
      try {
        const entry = this.p.prepare ? await this.p.prepare(m.entry, () => (m.state = 'fetching')) : m.entry;
        if (this.#stopped) return;
        m.state = 'loading';
        real = parts && this.p.split ? await this.p.split.create(entry, m.infos, parts) : await this.p.create(entry, m.infos);
      } catch (err) {
        return this.#failed(m, (err as Error).message);
      }
      if (this.#stopped) return;
      this.#swap(m, real);
      const outcome = await Promise.all(real.map((b) => firstLoad(b)));
      if (this.#stopped) return; // the node stops every backend it holds
      if (outcome.every((o) => o === undefined)) {
        m.state = 'loaded';
        m.loadedAt = this.#now();
        this.p.onEvent({ kind: 'loaded', model: m.entry.name, reason, detail: why, ...(m.parts ? { parts: m.parts } : {}) });
      } else {
        // One backend that cannot load fails the load: an on-demand entry is not retried behind the requests waiting for it.
        const text = outcome.filter((o) => o !== undefined).join('; ');
        await Promise.all(real.map((b) => b.stop()));
        this.#failed(m, text);
      }
    } finally {
      release();
    }
  }

  #failed(m: Managed, text: string): void {
    const ph = Lifecycle.placeholders(m.infos, m.backends[0]?.descriptor ?? { workloads: [], audio: false }, `load failed: ${text}`);
    m.state = 'unloaded';
    m.roomReady = false;
    m.retryAt = this.#retryAt();
    this.#whole(m);
    m.error = text;
    this.#swap(m, ph);
    this.p.onEvent({ kind: 'load-failed', model: m.entry.name, reason: 'failed', detail: text });
  }

  /** The entry holds `next` before the node swaps (the swap wakes queues, which read the entry's state). */
  #swap(m: Managed, next: Backend[]): void {
    const old = m.backends;
    m.backends = next;
    this.p.swap(old, next);
  }

  /** Stop a loaded entry: out of the slot table at once (no new request), its memory counted until the engine is gone. */
  #unload(m: Managed, reason: UnloadReason, detail: string): Promise<void> {
    const real = m.backends;
    m.state = 'unloading';
    const ph = Lifecycle.placeholders(m.infos, real[0]?.descriptor ?? { workloads: [], audio: false });
    this.#swap(m, ph);
    this.p.onEvent({ kind: 'unloading', model: m.entry.name, reason, detail });
    // An engine the node does not run (a router's model) is asked to unload; one it runs is stopped.
    m.stopping = Promise.all(real.map((b) => (b.unloadEngine ? b.unloadEngine() : b.stop()))).then(() => {
      m.state = 'unloaded';
      m.roomReady = false;
      this.#whole(m);
      m.stopping = undefined;
      this.p.onEvent({ kind: 'unloaded', model: m.entry.name, reason, detail });
    });
    return m.stopping;
  }

  /**
   * A backend's engine dropped its model by itself (a router's own
   * `--models-max`, another client's unload): the entry is unloaded now,
   * its memory free, and the next request loads it again through placement.
   */
  lost(b: Backend, why: string): void {
    const m = this.#of(b);
    if (!m || !ownsLoad(m) || m.state !== 'loaded') return;
    m.state = 'unloaded';
    m.roomReady = false;
    this.#swap(m, Lifecycle.placeholders(m.infos, b.descriptor));
    this.p.onEvent({ kind: 'unloading', model: m.entry.name, reason: 'endpoint', detail: why });
    this.p.onEvent({ kind: 'unloaded', model: m.entry.name, reason: 'endpoint', detail: why });
  }

  /** When an always split entry is tried again: SPLIT_RETRY_MS to twice that. */
  #retryAt(): number {
    return this.#now() + SPLIT_RETRY_MS * (1 + (this.p.random ?? Math.random)());
  }

  /** Unloaded: what it holds here is all of it again, whole, until a split load says otherwise. */
  #whole(m: Managed): void {
    m.holding = m.need;
    m.parts = undefined;
  }

  /**
   * A model split across members lost a part (a lender died, left, or no
   * longer holds its lend; SPEC section 11): it stops now (out of the slot
   * table at once; its engine, tunnels and lends go), and is placed again
   * when room returns: the next request's placement for an on-demand entry,
   * this lifecycle's retry for an always one.
   */
  dropped(b: Backend, why: string): void {
    const m = this.#of(b);
    if (!m) return;
    if (m.state === 'loaded') {
      m.retryAt = this.#retryAt();
      void this.#unload(m, 'lender', why);
    } else if (m.state === 'loading') void b.stop(); // its load fails with the engine's end
  }

  /** An operator's unload: never one with a request in flight or queued, never an always entry. */
  unload(model: string, detail: string): UnloadAnswer {
    const mine = this.#entries.filter((m) => m.entry.name === model);
    if (mine.length === 0) return { kind: 'unknown', model };
    const loaded = mine.filter((m) => m.onDemand && m.state === 'loaded');
    if (loaded.length === 0) {
      if (mine.some((m) => m.onDemand && m.state === 'unloading')) return { kind: 'unloading', model };
      if (mine.every((m) => !m.onDemand)) return { kind: 'always', model };
      return { kind: 'unloaded', model };
    }
    const idle = loaded.filter((m) => this.#idle(m));
    if (idle.length === 0) return { kind: 'busy', model };
    for (const m of idle) void this.#unload(m, 'operator', detail);
    return { kind: 'unloading', model };
  }

  /** Unload every on-demand entry idle for its idle_unload; place an always split entry that is not running. */
  sweep(): void {
    const now = this.#now();
    for (const m of this.#entries) {
      if (!m.keepPlaced || m.state !== 'unloaded' || this.#stopped || now < m.retryAt) continue;
      m.retryAt = this.#retryAt();
      this.load(m.entry.name, 'start', 'always: placed once its budget, or its budget and its lenders\' together, hold it');
    }
    for (const m of this.#entries) {
      if (!this.#idle(m) || m.entry.idle_unload === 0) continue;
      const idleMs = now - this.#idleSince(m);
      if (idleMs >= m.entry.idle_unload) void this.#unload(m, 'idle', `no request for ${Math.round(idleMs / 1000)} s (idle_unload ${Math.round(m.entry.idle_unload / 1000)} s)`);
    }
  }

  /** Wait for loads and unloads under way (node stop, tests). */
  async settled(): Promise<void> {
    await Promise.all(this.#entries.flatMap((m) => [m.loading, m.stopping].filter(Boolean)));
  }

  /** Every backend any entry holds now (the node stops these). */
  backends(): Backend[] {
    return this.#entries.flatMap((m) => m.backends);
  }
}

/**
 * Start a backend for an on-demand load: resolves undefined once it serves,
 * or the failure's text at its first failure (an engine that exits, a bad
 * file), with the engine's own error lines when it printed any.
 */
function firstLoad(b: Backend): Promise<string | undefined> {
  return new Promise((resolve) => {
    let done = false;
    const finish = (v: string | undefined) => {
      if (done) return;
      done = true;
      b.off('state', onState);
      resolve(v);
    };
    const failure = () => {
      const tail = (b as { outputTail?: readonly string[] }).outputTail ?? [];
      const errorsSaid = tail.filter((l) => /error|failed|cannot|unable/i.test(l)).slice(-3);
      return `${b.id}: ${b.reason.replace(/; restarting \(.*\)$/, "")}${errorsSaid.length ? ` — ${errorsSaid.join(' | ')}` : ''}`;
    };
    const onState = (next: string) => {
      if (next === 'healthy') finish(undefined);
      else if (next === 'unhealthy' || next === 'dead' || next === 'stopped') finish(failure());
    };
    b.on('state', onState);
    void b.start().then(() => {
      if (b.state === 'healthy') finish(undefined);
      else if (b.state !== 'starting') finish(failure());
    });
  });
}

export function bytesText(n: number): string {
  if (n >= 1024 ** 3) return `${(n / 1024 ** 3).toFixed(1)} GiB`;
  if (n >= 1024 ** 2) return `${(n / 1024 ** 2).toFixed(1)} MiB`;
  if (n >= 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${n} B`;
}
