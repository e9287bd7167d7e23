/**
 * The snapshot routing decides on, and the decision it returns. Routing is
 * pure: everything it needs is in these types, with clock and randomness
 * passed in.
 */
import type { Descriptor } from '../workloads/workloads.ts';
import type { CacheDigest } from '../prompt/held.ts';
import type { Eviction, ReturnChance } from './slots.ts';

export type RouteReason = 'local' | 'scored' | 'session' | 'prefix' | 'pinned' | 'preferred' | 'explore' | 'most-free' | 'queued';

/** One target as a host reports it: its descriptor and its slots. */
export interface TargetView {
  descriptor: Descriptor;
  /** Slots of healthy backends. */
  slots: number;
  busy: number;
  /** Of `busy`, the slots this node's own forwards held when the report was made (undefined: not reported, an older node). */
  yourBusy?: number;
  /** Backends still loading (undefined: not reported). */
  loading?: number;
  /** What its engines are believed to hold in their prompt caches (SPEC section 7); undefined: not reported. */
  digest?: CacheDigest;
  /** With no slot free: the executor's estimate of the ms until one frees (SPEC section 7). */
  releaseMs?: number;
  /** Model lifecycle (SPEC section 11); undefined: an older node (loaded). */
  state?: 'unloaded' | 'fetching' | 'loading' | 'loaded' | 'unloading';
  /** Bytes one copy needs. */
  memory?: number;
  /** This host may load and unload it. */
  onDemand?: boolean;
  /** Free slots held back from batch requests now (queue/reserve.ts); undefined: none. */
  reserved?: number;
  /** The engine's text of its last failed load. */
  loadError?: string;
  /** A model bigger than one host (SPEC section 11): who may lend to it, and its parts while it runs split. */
  split?: { lenders: 'auto' | readonly string[]; parts?: readonly { member: string; bytes: number }[] };
}

/** One model on one host, as this node sees it (local: now; remote: from its last report). */
export interface HostModelView {
  /** undefined: an older node that publishes no targets (chat and completion only). */
  targets: TargetView[] | undefined;
  /** For an older node: the model's slots and busy. */
  slots: number;
  busy: number;
  healthyBackends?: number;
  /** Context length per slot, when known. */
  ctx?: number;
  /** Requests waiting in that host's own queue for this model (informational). */
  queued?: number;
  perfSamples?: number;
  overheadMs?: number;
  ratePer1k?: number;
  /** The host has the model's file (SPEC section 11: it loads without fetching first). */
  hasFile?: boolean;
  /** The host's file of the model (size and SHA-256), when it publishes one: whom a fetch can come from. */
  file?: { size: number; sha256: string };
  /** A fetch of the model's file in progress on that host: bytes done of size. */
  fetchProgress?: { bytes: number; size: number };
}

export interface HostView {
  name: string;
  local: boolean;
  /** Poll round-trip EWMA; 0 for this node. */
  rttMs: number;
  /** Report younger than stale_after (always true for this node). */
  fresh: boolean;
  /** Clock ms when the poll behind the report was sent (this node: now). */
  polledAt: number;
  models: ReadonlyMap<string, HostModelView>;
  /** The host's memory budget and use in bytes (SPEC section 11); undefined: not reported. */
  memory?: { budget: number; used: number; free: number };
  /** The host is draining (SPEC section 13): no new work is placed on it, nor a model loaded there. */
  draining?: boolean;
  /** The host lends memory to models bigger than one host (node.lend_memory: true). */
  lends?: boolean;
  /** What it lends now, to whom and for which model (when it lends). */
  lentTo?: readonly { to: string; model: string; bytes: number }[];
  /**
   * The chance an idle conversation returns as this host's own slot choice reads it (its report's `turn_gaps`,
   * route/slots.ts curveChance); undefined: this node, or a host that does not say (priced with this node's own).
   */
  returnChance?: ReturnChance;
}

/**
 * A forward of this node, in flight or recently ended: counted against (or,
 * once ended, added back to) the target it went to.
 */
/** What this node's forwards change in a report of one target of a member (see remoteFree in eligibility.ts). */
export interface ForwardTally {
  /**
   * In flight, started at or after the report's poll: the report cannot know of them. With the report's own count of
   * this node's forwards (`your_busy`): every one in flight.
   */
  deducted: number;
  /** Started before the poll (the report shows them busy) and ended since. With `your_busy`: that count. */
  freed: number;
}

export interface ForwardRecord {
  host: string;
  model: string;
  workload: string;
  /** descriptorKey of the target it was counted against. */
  target: string;
  startedAt: number;
  /** Set when it ended after holding a slot there. */
  endedAt?: number;
}

/** A refusal by `host` of a forward for (model, workload): full for them until a report polled after `at`. */
export interface RefusalMark {
  host: string;
  model: string;
  workload: string;
  at: number;
}

export interface RouteRequest {
  model: string;
  workload: string;
  /** Prompt size in tokens (JSON body bytes ÷ 4); undefined for uploads. */
  promptTokens: number | undefined;
  sessionKey?: string;
  /** Prefix affinity: an implicit session key from the start of the prompt (used only without sessionKey). */
  prefixKey?: string;
  /** The prompt's tokens as pricing counts them (the prefix chain's when it covers the whole prompt); default promptTokens. */
  pricedTokens?: number;
  /** Hosts this request has already waited for as long as it paid: priced, but never waited for again. */
  noWait?: readonly string[];
  pin?: string;
  prefer: readonly string[];
}

export interface RouteOptions {
  /** routing.performance */
  performance: boolean;
  /** Uniform [0, 1) */
  random: () => number;
  /** A counter that advances on every call, for round robin among ties. */
  roundRobin: number;
}

/** A host that can do the request: eligible, with its free slots after deductions and marks. */
export interface Candidate {
  host: string;
  local: boolean;
  fresh: boolean;
  /** At least one eligible target has a healthy backend (slots > 0). */
  healthy: boolean;
  /** At least one eligible target has a backend still loading: requests wait for it as if it were full. */
  loading: boolean;
  /** At least one eligible target is on demand and unloaded there: it can be loaded (SPEC section 11). */
  available?: boolean;
  free: number;
  /** Healthy slots over its eligible targets: a session home's weight (SPEC 9.6, "Session home"); undefined: not counted. */
  slots?: number;
  rttMs: number;
  overheadMs?: number;
  ratePer1k?: number;
  /** descriptorKey of the eligible target with the most free slots (ties: sorted key), where a forward is counted. */
  bestTarget: string;
  /** Tokens at the start of this request's prompt the host is believed to hold (see warmth.ts); undefined: unknown (0). */
  cached?: number;
  /** Of `cached`, tokens its engine would restore from its host-RAM prompt cache (priced at their restore, SPEC 9.6). */
  restored?: number;
  /** With no slot free: ms until one frees there, the least over its eligible targets that report it. */
  releaseMs?: number;
  /** Requests this node already sent or holds for the host beyond its free slots: they start there before this one. */
  ahead?: number;
  /** This node's forward there was refused since its report (SPEC 9 step 9): priced full until a forward there ends. */
  refused?: true;
  /** The slot this request would take there (predicted from the digest's slot state, warmth.ts); undefined: unknown. */
  slot?: number;
  /** What taking that slot destroys (SPEC 9.6, "Eviction"); undefined: nothing of worth. */
  evicted?: Eviction;
}

export type Decision =
  | {
      kind: 'run';
      host: string;
      local: boolean;
      reason: RouteReason;
      target: string;
      /** The cached tokens the price assumed there (SPEC 9.6: recorded against the engine's own count); undefined: not priced. */
      predictedCached?: number;
      /** The slot the entry predicts the executor takes, and what that evicts (the decision feed). */
      slot?: number;
      evicted?: Eviction;
    }
  /**
   * Nothing to run on now. With `host`: the request waits for that full host,
   * whose warm slot beats every free one even after the wait, for at most
   * `holdMs` (undefined: no free host to fall back on), then is priced again.
   */
  | { kind: 'wait'; host?: string; holdMs?: number };
