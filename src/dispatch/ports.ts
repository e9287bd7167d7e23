/**
 * What the life of a request needs from the node, and nothing more: the
 * node (node/node.ts) implements this; table tests implement it with fakes.
 */
import type { AliasLookup } from '../aliases/resolve.ts';
import type { Backend } from '../engines/backend.ts';
import type { CacheRun } from '../engines/cache-book.ts';
import type { PrefixChain } from '../prompt/held.ts';
import type { Lease } from '../engines/targets.ts';
import type { ForwardBook } from '../forward/book.ts';
import type { PeerLink } from '../forward/send.ts';
import type { Log } from '../log.ts';
import type { Metrics } from '../metrics/metrics.ts';
import type { QueueSet } from '../queue/fifo.ts';
import type { HostView } from '../route/types.ts';
import type { Workload } from '../workloads/workloads.ts';
import type { DecisionFeed } from './decisions.ts';
import type { Reservation } from './types.ts';
import type { Loads } from './entry/load.ts';

export interface DispatchRules {
  /** routing.queue_max */
  queueMax: number;
  /** routing.queue_timeout, ms */
  queueTimeoutMs: number;
  /** routing.forward_retry */
  forwardRetry: number;
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
  /** Take a slot now on a backend of `model` whose target does `workload`, or undefined. */
  tryLease(model: string, workload: Workload, sessionKey?: string): Lease | undefined;
  /** Does any local target of this model do the workload (healthy or not)? */
  does(model: string, workload: Workload): boolean;
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
  readonly cache?: { begin(backend: Backend, chain: PrefixChain): CacheRun };
  /** On-demand loads asked by this node (SPEC section 11); absent: never asks. */
  readonly loads?: Loads;
}
