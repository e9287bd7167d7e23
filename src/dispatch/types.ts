/** What the life of one request works on: the parsed request, where it runs, and how a run ended. */
import type { ScannedObject } from '../http/json-scan.ts';
import type { Lease } from '../engines/targets.ts';
import type { PrefixChain } from '../route/cache.ts';
import type { RouteReason } from '../route/types.ts';
import type { Workload } from '../workloads/workloads.ts';

/** One inference request as the API parsed it (SPEC section 9, step 1). */
export interface DispatchRequest {
  /** The path the engine gets (no query). */
  path: string;
  workload: Workload;
  /** The model to run: the client's, or what its alias resolved to. */
  model: string;
  stream: boolean;
  /** JSON body bytes ÷ 4; undefined for uploads. */
  promptTokens: number | undefined;
  sessionKey: string | undefined;
  /** Prefix affinity's implicit key (set by the dispatcher when there is no session header). */
  prefixKey?: string;
  /** The prompt's prefix chain (SPEC 9.6), set by the dispatcher for generation requests. */
  chain?: PrefixChain;
  /** The prompt's tokens as pricing counts them: the chain's when it covers the whole prompt. */
  pricedTokens?: number;
  pin: string | undefined;
  prefer: string[];
  /** The body exactly as the client sent it. */
  body: Buffer;
  /** Where the JSON body's top-level members lie; undefined for uploads. */
  scan: ScannedObject | undefined;
  /** The client's Content-Type (uploads keep theirs; JSON bodies go to engines as application/json). */
  contentType: string;
  /** The client asked for usage in the stream itself. */
  clientWantsUsage: boolean;
  /** Set when `model` came from an alias: the name the client sent. */
  alias?: string;
  /** The body members get, made once (signing and retries reuse it). */
  forwardBody?: Buffer;
  /** Its SHA-256, for signing. */
  forwardSha256?: string;
}

/** Where a request will run, holding what it reserved there. */
/** `predictedCached`: the tokens pricing took as held where it runs (undefined: not priced). */
export type Placement =
  | { kind: 'local'; lease: Lease; reason: RouteReason; predictedCached?: number }
  | { kind: 'remote'; host: string; reason: RouteReason; end: (how: 'served' | 'refused') => void; predictedCached?: number }
  /** The on-demand load this request waited for failed (SPEC section 11): it ends with 503 and the engine's text. */
  | { kind: 'load-failed'; text: string };

export type { RefusedBy, RunOutcome } from '../forward/outcome.ts';
