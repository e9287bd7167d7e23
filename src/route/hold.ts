/**
 * Waiting for a warm host (SPEC section 9, step 6): when the cheapest host
 * is full and its warm slot beats every free host even after the wait, the
 * request waits in the queue for that host — for at most the time it saves,
 * counted from when it began to wait for a warm host — then is priced again
 * with that host no longer waited for (it can still run there when a slot
 * frees). A second host waited for after the first shares the first's
 * clock: the time a warm host saves is against the best free host, which
 * has been there all along, so a request that gave up on one full host
 * waits for the next only as long as the saving is not yet spent (issue
 * 42: on Mooncake's trace, chained holds kept requests 2.5 s in an entry's
 * queue beside free slots, each hold paying on its own). Pure: the
 * request's hold state in, the decision to act on and the next state out.
 */
import type { Decision, RouteRequest } from './types.ts';

export interface HoldState {
  /** The host waited for now, and until when (clock ms; Infinity: no free host to fall back on yet). */
  readonly hold?: { readonly host: string; readonly until: number };
  /** Hosts already waited for as long as they paid. */
  readonly passed: readonly string[];
  /** When it began to wait for its first warm host with a free host to fall back on (clock ms). */
  readonly since?: number;
}

export const NO_HOLD: HoldState = { passed: [] };

export interface HoldStep {
  decision: Decision;
  state: HoldState;
  /** Price again at this time (the hold ends) even if nothing else happens. */
  wakeAt?: number;
}

/**
 * Decide with `decide` (given the hosts not to wait for), keeping or ending
 * the request's hold. A hold's deadline is set when it begins and kept while
 * the decision names the same host; a hold that has run out passes that host
 * and decides again (at most once per host).
 */
export function holdStep(s: HoldState, decide: (req: Pick<RouteRequest, 'noWait'>) => Decision, now: number): HoldStep {
  let state = s;
  for (;;) {
    const decision = decide({ noWait: state.passed });
    const since = state.since !== undefined ? { since: state.since } : {};
    if (decision.kind !== 'wait' || decision.host === undefined) return { decision, state: { passed: state.passed, ...since } };
    const host = decision.host;
    // The saving is counted from the first hold that had a free host to fall back on, whichever host it waits for now.
    const limit = decision.holdMs === undefined ? Infinity : (state.since ?? now) + decision.holdMs;
    // The deadline is set once a free host to fall back on exists, and kept while the same host is waited for.
    const kept = state.hold?.host === host ? state.hold.until : Infinity;
    const until = kept !== Infinity ? kept : limit;
    const began = state.since ?? (until !== Infinity ? now : undefined);
    const clock = began !== undefined ? { since: began } : {};
    if (now < until) return { decision, state: { hold: { host, until }, passed: state.passed, ...clock }, ...(until !== Infinity ? { wakeAt: until } : {}) };
    state = { passed: [...state.passed, host], ...clock };
  }
}
