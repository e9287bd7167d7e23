/** What the life of one request works on: the parsed request, where it runs, and how a run ended. */
import type { MoveClaim } from '../survive/move-plan.ts';
import type { ApiError } from '../http/errors.ts';
import type { ScannedObject } from '../http/json-scan.ts';
import type { Lease } from '../engines/targets.ts';
import type { PrefixChain } from '../prompt/held.ts';
import type { Candidate, RouteReason } from '../route/types.ts';
import type { Endpoint, Workload } from '../workloads/workloads.ts';
import type { Priority } from '../config/key-spec.ts';
import type { Caller } from '../keys/access.ts';
import type { Splice, Transcript } from '../survive/index.ts';

/**
 * One inference request as the API parsed it (SPEC section 9, step 1).
 * Read-only: what routing learns of it is a separate record (`Routed`).
 */
export interface DispatchRequest {
  /** The path the engine gets (no query). */
  readonly path: string;
  /** What the path asks: the workload it needs, the dialect it speaks, infer or count_tokens (workloads/). */
  readonly endpoint: Endpoint;
  /** The model the client named (a model or an alias). */
  readonly model: string;
  readonly stream: boolean;
  /** The estimate of its prompt: JSON body bytes ÷ 4; undefined for uploads. */
  readonly promptTokens: number | undefined;
  readonly sessionKey: string | undefined;
  readonly pin: string | undefined;
  readonly prefer: readonly string[];
  /** The body exactly as the client sent it. */
  readonly body: Buffer;
  /** Where the JSON body's top-level members lie; undefined for uploads. */
  readonly scan: ScannedObject | undefined;
  /** The client's Content-Type (uploads keep theirs; JSON bodies go to engines as application/json). */
  readonly contentType: string;
  /** The client asked for usage in the stream itself. */
  readonly clientWantsUsage: boolean;
  /** The key that sent it (SPEC section 12); undefined while the mesh has no keys. */
  readonly caller?: Caller;
  /** Its priority band: batch when it or its key asks for batch, else interactive. */
  readonly priority?: Priority;
  /** The output it may produce as the body bounds it (`max_tokens`, `max_completion_tokens`, `max_output_tokens`); undefined when unbounded. */
  readonly maxTokens?: number;
  /**
   * A keyed request without a bound: the output held back for its key's limits until the engine's usage settles it
   * (the rest of its model's context: keys/limits.ts `heldOutput`). Only limits read it; fair queueing's estimate of
   * an unbounded answer stays a typical one.
   */
  readonly heldOutput?: number;
  /** The client's W3C `traceparent` header, as sent (read only when tracing is on; junk is ignored there). */
  readonly traceparent?: string;
}

/** What the entry learns of a request as it routes it (the executor of a forward, what the forward says). */
export interface Routed {
  /** The model it runs as: the client's, or what its alias resolved to. */
  readonly model: string;
  /** The workload it needs (its endpoint's). */
  readonly workload: Workload;
  /** Set when `model` came from an alias: the name the client sent. */
  readonly alias?: string;
  /** The prompt's prefix chain (SPEC 9.6), for generation requests. */
  readonly chain?: PrefixChain;
  /** Index in `chain` of its head (tools and system: what conversations share); the executor's slots publish it. */
  readonly chainHead?: number;
  /** The prompt's tokens as pricing counts them: the chain's when it covers the whole prompt. */
  readonly pricedTokens?: number;
  /** Prefix affinity's implicit key (without a session header). */
  readonly prefixKey?: string;
  /** How its stream survives its executor (SPEC 13); absent: a cut ends it with an error event. */
  readonly survive?: StreamSurvival;
  /** A member's idle slot that holds more of this prompt than the host it runs on (SPEC 13, "Moving a cache"). */
  readonly move?: MoveClaim;
  /** A forward: the slot its entry priced here (the `slot` claim, dispatch/evict-claim.ts). */
  readonly slotNamed?: number;
}

/** The slot an entry priced at a member, and the expected tokens of re-prefill taking it costs there. */
export interface SlotPriced {
  readonly slot: number;
  readonly evict: number;
}

/** A stream's part in continuing a cut (SPEC 13, survive/). */
export interface StreamSurvival {
  /** What the client has received, read as it is written (the entry's, on the first run). */
  readonly transcript?: Transcript;
  /** A cut is handed back open (http/relay.ts `handBack`): the entry continues it; a forward's executor cuts its connection so its entry does. */
  readonly handBack: boolean;
  /** This run continues a cut stream: its stream is spliced into the one the client holds. */
  readonly splice?: Splice;
  /** Tokens of the answer this continuation carries in its prompt: accounted as output, as the client's usage shows them. */
  readonly carried?: number;
}

/** A request as routing resolved it: the parsed request with its routed record over it (read-only both). */
export type RoutedRequest = Omit<DispatchRequest, 'model'> & Routed;

/** Where a request will run, holding what it reserved there. */
/** `predictedCached`: the tokens pricing took as held where it runs (undefined: not priced). */
export type Reservation =
  /** `move`: a member holds more of the prompt than the host chosen (survive/move-plan.ts moveHint). */
  | { kind: 'local'; lease: Lease; reason: RouteReason; predictedCached?: number; cands?: readonly Candidate[]; move?: MoveClaim }
  /** `waitUntil`: a forward that may wait in the member's line for a slot until then (clock ms; queue/gate.ts). */
  /** `priced`: the slot priced there and the eviction that costs (expected tokens, dispatch/evict-claim.ts); undefined: slots not priced there. */
  | { kind: 'remote'; host: string; reason: RouteReason; end: (how: 'served' | 'refused', slot?: number) => void; predictedCached?: number; cands?: readonly Candidate[]; waitUntil?: number; priced?: SlotPriced; move?: MoveClaim }
  /**
   * The request can no longer be placed while it waits: the on-demand load it waited for failed (SPEC section 11), or
   * every host that could run it began draining (SPEC section 13). It ends with this error.
   */
  | { kind: 'fail'; error: ApiError };

export type { RefusedBy, RunOutcome } from '../forward/outcome.ts';
