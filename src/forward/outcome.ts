import type { MoveResult } from '../survive/move-plan.ts';

/** How one run of a request ended, local or forwarded: what the entry's steps (dispatch/entry/steps.ts) react to. */

/** Why a forward did not run, before anything reached the client. */
/** `waited`: the forward waited at the executor for a slot as long as it was allowed (queue/gate.ts): the host was full, nothing refused it. */
/** `evicts`: the executor's slot would destroy a live conversation's cache the entry priced as free; the entry prices the host again. */
/** `draining`: the member began draining (SPEC section 13) after the report the entry placed it by; it takes nothing new. */
export type RefusedBy = 'full' | 'workload' | 'auth' | 'connection' | 'quiet' | 'waited' | 'evicts' | 'draining';

/** How one run (local or forwarded) ended, as placement sees it. */
export type RunOutcome =
  /** Something was sent to the client (a result, a relayed error, or a stream that later broke). */
  /** cachedTokens: the engine's own cached-token count, when it said (X-Viiwork-Cached-Tokens from an executor). */
  /** moved: what the executor said became of a member's slot cache taken for it (X-Viiwork-Moved). */
  | { kind: 'answered'; status: number; firstContentAt?: number; cachedTokens?: number; moved?: MoveResult; slot?: number }
  | { kind: 'aborted' }
  /** A forward refused before its first byte, by the receiver's mark or no connection: retried. */
  | { kind: 'refused'; by: RefusedBy; detail: string }
  /** The engine failed before its first byte (here, or on the executor, marked `engine`). */
  | { kind: 'engine-failed'; host: string; text: string }
  /**
   * A stream cut after the client's headers, its response left open for a continuation (SPEC 13): `host` ran it.
   * `settle`: what the run would have recorded of itself (a local run's usage), for when it is not continued.
   */
  | { kind: 'cut'; host: string; detail: string; settle?: () => void };
