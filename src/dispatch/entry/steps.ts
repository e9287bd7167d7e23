/**
 * The entry's steps as a state machine (SPEC section 9, steps 8 and 9): where one
 * request is between arrival and its answer, and what happens next on each
 * event. Pure: the driver (entry.ts) performs the action, turns what
 * came of it into the next event, and asks again. Table tests drive it
 * without sockets or timers.
 */
import type { RunOutcome } from '../types.ts';

export interface EntryRules {
  /** routing.queue_max: 0 means no queue. */
  queueMax: number;
  /** routing.forward_retry: refused forwards retried at once before going back to the queue. */
  forwardRetry: number;
}

export interface EntryState {
  /** The request has waited in the queue (its route reason is then `queued`). */
  readonly queued: boolean;
  /** The next wait is at the head of the queue (after a refusal). */
  readonly front: boolean;
  /** Immediate retries used since the last placement from the queue. */
  readonly retries: number;
  /** A forward of this request was refused: a deadline then gives 503, not 429. */
  readonly refused: boolean;
  /** Hosts whose engine failed for this request: not tried again for it. */
  readonly failed: readonly string[];
  /** The last engine failure's own text, for the 502 when no route is left. */
  readonly engineError?: string;
}

export type EntryEvent =
  /** The request arrived; `queueDepth` others already wait for its (model, workload). */
  | { kind: 'arrived'; queueDepth: number }
  /** A routing attempt: placed, or not (and whether any capable, healthy host is left to wait for). */
  | { kind: 'tried'; placed: boolean; routeLeft: boolean }
  /** The wait in the queue ended. */
  | { kind: 'waited'; how: 'placed' | 'full' | 'timeout' | 'aborted' }
  /** A run ended. */
  | { kind: 'ran'; outcome: RunOutcome };

export type Failure = 'queue-full' | 'queue-timeout' | 'queue-timeout-refused' | 'engine-failed';

export type EntryAction =
  | { kind: 'try' }
  | { kind: 'wait'; front: boolean }
  | { kind: 'run' }
  | { kind: 'end' }
  | { kind: 'fail'; failure: Failure };

export const INITIAL: EntryState = { queued: false, front: false, retries: 0, refused: false, failed: [] };

export function step(s: EntryState, e: EntryEvent, rules: EntryRules): [EntryState, EntryAction] {
  switch (e.kind) {
    case 'arrived':
      // FIFO: with others already waiting, this one waits behind them.
      return e.queueDepth === 0 ? [s, { kind: 'try' }] : wait(s, rules);
    case 'tried':
      if (e.placed) return [s, { kind: 'run' }];
      if (!e.routeLeft && s.engineError !== undefined) return [s, { kind: 'fail', failure: 'engine-failed' }];
      return wait(s, rules);
    case 'waited':
      switch (e.how) {
        case 'placed':
          return [{ ...s, queued: true, retries: 0 }, { kind: 'run' }];
        case 'full':
          return [s, { kind: 'fail', failure: 'queue-full' }];
        case 'timeout':
          return [s, { kind: 'fail', failure: s.refused ? 'queue-timeout-refused' : 'queue-timeout' }];
        case 'aborted':
          return [s, { kind: 'end' }];
      }
    // falls through (unreachable: every case returns)
    case 'ran':
      return ran(s, e.outcome, rules);
  }
}

function wait(s: EntryState, rules: EntryRules): [EntryState, EntryAction] {
  if (rules.queueMax === 0) return [s, { kind: 'fail', failure: 'queue-full' }];
  return [{ ...s, queued: true }, { kind: 'wait', front: s.front }];
}

function ran(s: EntryState, o: RunOutcome, rules: EntryRules): [EntryState, EntryAction] {
  switch (o.kind) {
    case 'answered':
    case 'aborted':
    // A cut reaches the steps only once the entry has continued or ended it (dispatch/entry/entry.ts #goOn).
    case 'cut':
      return [s, { kind: 'end' }];
    case 'refused': {
      // A forward that waited at a full executor as long as it could (queue/gate.ts) was not refused, nor one sent back to
      // be priced again (its host had a slot): its deadline stays a 429.
      const next = { ...s, refused: s.refused || (o.by !== 'waited' && o.by !== 'evicts'), front: true };
      if (s.retries < rules.forwardRetry) return [{ ...next, retries: s.retries + 1 }, { kind: 'try' }];
      return wait({ ...next, retries: 0 }, rules);
    }
    case 'engine-failed':
      // That host is out for this request; any other capable host is tried at once (bounded by the number of hosts).
      return [{ ...s, refused: true, front: true, failed: [...s.failed, o.host], engineError: o.text }, { kind: 'try' }];
  }
}
