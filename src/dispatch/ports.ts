/**
 * What the life of a request needs from the node, and nothing more: the
 * node (node/node.ts) implements this; table tests implement it with fakes.
 */
import type { AliasLookup } from '../aliases/resolve.ts';
import type { Backend } from '../engines/backend.ts';
import type { CacheRun } from '../engines/cache-book.ts';
import type { Evicted, SlotContent } from '../engines/cache-model.ts';
import type { MoveClaim, MoveResult } from '../survive/move-plan.ts';
import type { ReturnChance } from '../route/slots.ts';
import type { PrefixChain } from '../prompt/held.ts';
import type { Lease } from '../engines/targets.ts';
import type { ForwardBook } from '../forward/book.ts';
import type { PeerLink } from '../forward/send.ts';
import type { Gone } from '../http/gone.ts';
import type { Log } from '../log.ts';
import type { Metrics } from '../metrics/metrics.ts';
import type { QueueSet } from '../queue/fifo.ts';
import type { Flow } from '../queue/fair.ts';
import type { LineOutcome } from '../queue/gate.ts';
import type { HostView } from '../route/types.ts';
import type { Workload } from '../workloads/workloads.ts';
import type { DecisionFeed } from './decisions.ts';
import type { Reservation, RoutedRequest } from './types.ts';
import type { TimelineBook } from './timeline.ts';
import type { Tracing } from '../telemetry/tracing.ts';
import type { Loads } from './entry/load.ts';
import type { History } from '../history/store.ts';
import type { RunUsage } from '../keys/settle.ts';

/** What one run on a local engine used (keys/settle.ts, where the node settles it). */
export type ServedUsage = RunUsage;

export interface DispatchRules {
  /** routing.queue_max */
  queueMax: number;
  /** routing.queue_timeout, ms */
  queueTimeoutMs: number;
  /** routing.batch_queue_timeout, ms: how long a batch request waits (SPEC section 12); default queueTimeoutMs. */
  batchQueueTimeoutMs?: number;
  /** routing.forward_retry */
  forwardRetry: number;
  /** routing.forward_wait, ms: how long a forward may wait at a full executor (queue/gate.ts); 0 or absent: never. */
  forwardWaitMs?: number;
  /** routing.performance */
  performance: boolean;
  /** api.stream_stall, ms */
  streamStallMs: number;
  /** api.write_stall, ms */
  writeStallMs: number;
  /** routing.prefix_affinity */
  prefixAffinity: boolean;
  /** api.agent_hygiene (prompt-cache hygiene for agent clients; docs/api.md) */
  agentHygiene?: boolean;
}

export interface LocalSlots {
  /**
   * Take a slot now on a backend of `model` whose target does `workload`, or undefined. With `flow` (a keyed or batch
   * request): undefined too while a forward that ranks at least as high waits here for one (queue/gate.ts).
   */
  tryLease(model: string, workload: Workload, sessionKey?: string, flow?: Flow): Lease | undefined;
  /** Wait in this node's line for a slot, for at most `ms` (a forward that found none free); absent: forwards never wait. */
  wait?(model: string, workload: Workload, sessionKey: string | undefined, flow: Flow, ms: number, signal?: Gone): Promise<LineOutcome<Lease>>;
  /** Does any local target of this model do the workload (healthy or not)? */
  does(model: string, workload: Workload): boolean;
  /** The lease, counted as member `member`'s until released (its `your_busy`, SPEC section 7); absent: not counted. */
  heldBy?(lease: Lease, member: string): Lease;
}

export interface DispatchPorts {
  readonly name: string;
  readonly rules: DispatchRules;
  now(): number;
  random(): number;
  nextRoundRobin(): number;
  /** The routing snapshot of this moment: this node now, every peer from its last report. */
  snapshot(): HostView[];
  /** While the node is starting: resolves when it is ready (reports from every member are in). undefined once ready. */
  warming(): Promise<void> | undefined;
  /**
   * Poll at once the members whose reports are older than routing.stale_after
   * (only the pinned one, for a pin), before a request is refused on what they
   * said (SPEC section 7's first-request poll). Resolves true when some were
   * polled (a new snapshot may say otherwise), false when every report was fresh.
   */
  refresh?(pin: string | undefined): Promise<boolean>;
  /** A request starts waiting in a queue: the node may ask members to tell it when a slot frees. */
  waiting(): void;
  readonly slots: LocalSlots;
  readonly forwards: ForwardBook;
  readonly queues: QueueSet<Reservation>;
  readonly aliases: AliasLookup;
  readonly peers: PeerLink;
  /** A tokenizer of a healthy local engine serving `model` (llama-server's /tokenize, the embedded engine), for count_tokens. */
  tokenizer?(model: string): ((text: string, signal: AbortSignal) => Promise<number | undefined>) | undefined;
  /** A measured first-token time of this node's own execution. */
  recordScore(model: string, promptTokens: number, ttftMs: number): void;
  readonly metrics: Metrics;
  readonly decisions: DecisionFeed;
  readonly log: Log;
  /** The executor's record of its engines' caches (engines/cache-book.ts); absent: none kept. */
  readonly cache?: { begin(backend: Backend, chain: PrefixChain, head?: number, named?: number, session?: boolean): CacheRun; peek?(backend: Backend, chain: PrefixChain, named?: number): Evicted | undefined };
  /** The chance an idle conversation returns (route/slots.ts): what pricing weighs an eviction by; absent: the prior. */
  readonly returnChance?: ReturnChance;
  /** On-demand loads asked by this node (SPEC section 11); absent: never asks. */
  readonly loads?: Loads;
  /** A run here ended with the engine's answer: what it used, for the key's limits and usage (SPEC section 12). */
  served?(rr: RoutedRequest, used: ServedUsage): void;
  /** OpenTelemetry traces (telemetry/tracing.ts); absent: tracing is off, and nothing of it is made per request. */
  readonly tracing?: Pick<Tracing, 'begin' | 'finish'>;
  /** The last requests' timelines (dispatch/timeline.ts); absent: none kept. */
  readonly timelines?: TimelineBook;
  /** The node's history over time (history/store.ts); absent: none kept. */
  readonly history?: Pick<History, 'request'>;
  /** Slot caches taken from members (files/cache-move.ts, SPEC 13); absent: never moved. */
  readonly moves?: {
    pull(m: MoveClaim, b: Backend, cachedHere: number, slotFor: (c: SlotContent) => number | undefined, signal?: AbortSignal): Promise<MoveResult>;
    /** The engine body that ran a prompt ending at chain link `hash` on `b`: kept for a drain to hand the prompt on. */
    remember?(b: Backend, hash: string, path: string, body: Buffer): void;
  };
  /** When this node began draining (SPEC section 13), on its clock; undefined: it is not draining. */
  drainingSince?(): number | undefined;
}
