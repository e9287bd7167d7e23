/**
 * What the HTTP layer reads from the node. The node (node/node.ts)
 * implements it; api/ never imports the node itself.
 */
import type { AliasTable } from '../aliases/table.ts';
import type { CapacityPoller } from '../capacity/poller.ts';
import type { HeldDigests } from '../capacity/digest.ts';
import type { CapacityReport } from '../capacity/report.ts';
import type { Config } from '../config/schema.ts';
import type { DecisionFeed } from '../dispatch/decisions.ts';
import type { Dispatcher } from '../dispatch/dispatcher.ts';
import type { Reservation } from '../dispatch/types.ts';
import type { Backend } from '../engines/backend.ts';
import type { LoadAnswer, LoadReason, UnloadAnswer } from '../lifecycle/lifecycle.ts';
import type { Log } from '../log.ts';
import type { MemberTable } from '../mesh/members.ts';
import type { Metrics } from '../metrics/metrics.ts';
import type { QueueSet } from '../queue/fifo.ts';
import type { HostView } from '../route/types.ts';
import type { MeshMode } from '../security/secret.ts';
import type { RequestLimits } from './request.ts';
import type { Keyring } from '../keys/access.ts';
import type { Limiter } from '../keys/limiter.ts';
import type { ServedRecord, UsageBook, UsageRow } from '../keys/usage.ts';
import type { FileServer } from '../files/serve.ts';
import type { CacheMover } from '../files/cache-move.ts';
import type { OpenBodies } from '../http/open-bodies.ts';
import type { NodeHistory } from '../history/node-history.ts';
import type { TimelineBook, TimelineDoc } from '../dispatch/timeline.ts';
import type { WorkCount } from '../survive/drain.ts';
import type { LendBook } from '../split/lends.ts';
import type { UpgradeHandler } from '../split/tunnel.ts';

export type NodePhase = 'starting' | 'running' | 'stopping' | 'stopped';

export interface ApiNode {
  readonly name: string;
  readonly version: string;
  readonly config: Config;
  readonly phase: NodePhase;
  /** While starting (SPEC section 4): resolves when ready; undefined once ready. */
  readonly warming: Promise<void> | undefined;
  readonly log: Log;
  /** The node's handler for HTTP Upgrade requests (the RPC tunnel of a lending node, split/tunnel.ts); none: no upgrades. */
  readonly upgrade?: UpgradeHandler;
  readonly meshMode: MeshMode;
  readonly members: MemberTable;
  /** The address this node advertises in the mesh (once membership is up). */
  readonly advertise: string | undefined;
  /** The API port actually bound. */
  readonly apiPort: number;
  readonly poller: CapacityPoller | undefined;
  readonly aliases: AliasTable;
  readonly decisions: DecisionFeed;
  /** Inference requests held here (survive/drain.ts): each counted until its answer closes. */
  readonly work: Pick<WorkCount, 'hold'>;
  /** While draining (SPEC section 13). */
  readonly draining: boolean;
  /** Start a drain: no new work, what is here finishes, then the node leaves the mesh and stops. */
  drain(why: string): Promise<void>;
  /** The last requests' timelines (GET /v1/timeline/{id}). */
  readonly timelines: Pick<TimelineBook, 'get'>;
  /** A member's part of a timeline, fetched signed like a forward. */
  memberTimeline(host: string, id: string): Promise<TimelineDoc | { error: string }>;
  /** GET /v1/history (SPEC section 10). */
  readonly history: Pick<NodeHistory, 'keepMs' | 'query'>;
  readonly metrics: Metrics;
  readonly queues: QueueSet<Reservation>;
  readonly backends: readonly Backend[];
  readonly dispatcher: Dispatcher;
  readonly requestLimits: RequestLimits;
  /** Request bodies arriving now, per client address (api.max_open_bodies). */
  readonly openBodies: OpenBodies;
  /** Client keys and the mesh-wide key table (off when neither holds a key). */
  readonly keys: Keyring;
  /** Keys' limits across the mesh (SPEC section 12). */
  readonly limiter: Pick<Limiter, 'admit' | 'receive'>;
  /** Usage served here, hourly (SPEC section 12). */
  readonly usage: Pick<UsageBook, 'rows'>;
  recordUsage(r: ServedRecord): void;
  /** Every alive member's usage rows merged, and the members that did not answer. */
  meshUsage(sinceMs: number, key: string | undefined, byHour: boolean): Promise<{ rows: UsageRow[]; missing: string[] }>;
  /** GET /v1/files/{sha256}: model files for members (SPEC section 11). */
  readonly files: Pick<FileServer, 'handle'>;
  /** POST /v1/slot-cache/save and take: cache moves between members (SPEC section 13). */
  readonly moves: Pick<CacheMover, 'save' | 'take'>;
  /** POST /v1/split/lend, renew and release: memory lent to members (SPEC section 11, a model bigger than one host). */
  readonly lends: Pick<LendBook, 'lend' | 'renew' | 'release'>;
  now(): number;
  /** The routing snapshot of this moment. */
  hostViews(): HostView[];
  /** This node's own /v1/capacity document. */
  /** `held`: the digest version the poller holds (`?digests=`); unchanged digests are then not resent. */
  /** `member`: the member polling, told its own share of busy slots. */
  capacityReport(held?: HeldDigests, member?: string): CapacityReport;
  /**
   * Resolves when a slot of `model` is released here, at once when one is
   * free now (or the model is not served), or after `ms`. Bounded: past a
   * number of waiters it resolves at once.
   */
  slotReleased(model: string, ms: number): Promise<void>;
  /** Load an on-demand model here (SPEC section 11): answers at once, the load goes on behind the node's load lock. */
  loadModel(model: string, reason: LoadReason, detail: string): LoadAnswer;
  /** Unload an idle on-demand model here. */
  unloadModel(model: string, detail: string): UnloadAnswer;
  /** Relay an operator's load or unload to member `host` (signed like a forward): its status and JSON answer. */
  askMember(host: string, model: string, action: 'load' | 'unload', detail: string): Promise<{ status: number; body: unknown }>;
  /** An operator's load with no host named: the host placement picks, or why none. */
  placeModel(model: string, detail: string): Promise<{ host?: string; why: string }>;
  /** Alive viiwork members (this node included) whose reports show alias_version ≥ v. */
  aliasReach(version: number): { reached: number; members: number };
  /** The same for key_version (SPEC section 12). */
  keyReach(version: number): { reached: number; members: number };
}
