/**
 * Issue 8, acceptance 4: placement (SPEC section 9, steps 8 and 9) as a
 * table of state × event → next state and action. Pure, no sockets.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { INITIAL, step, type EntryAction, type EntryEvent, type EntryState } from '../../src/dispatch/entry/steps.ts';
import { forwardVerdict } from '../../src/forward/send.ts';

const rules = { queueMax: 64, forwardRetry: 1 };
const S = (over: Partial<EntryState> = {}): EntryState => ({ ...INITIAL, ...over });

/** Run a sequence of events from a state; the actions taken, and the final state. */
function drive(events: EntryEvent[], from = INITIAL, r = rules): { actions: EntryAction[]; state: EntryState } {
  let state = from;
  const actions: EntryAction[] = [];
  for (const e of events) {
    let a: EntryAction;
    [state, a] = step(state, e, r);
    actions.push(a);
  }
  return { actions, state };
}

const refusedFull = { kind: 'ran', outcome: { kind: 'refused', by: 'full', detail: 'HTTP 429 (full)' } } as const;
const waitedOut = { kind: 'ran', outcome: { kind: 'refused', by: 'waited', detail: 'HTTP 429 (waited)' } } as const;
const sentBack = { kind: 'ran', outcome: { kind: 'refused', by: 'evicts', detail: 'HTTP 429 (evicts)' } } as const;

describe('placement state machine', () => {
  const table: { name: string; events: EntryEvent[]; from?: EntryState; rules?: typeof rules; last: EntryAction; state?: Partial<EntryState> }[] = [
    { name: 'an empty queue: tried at once', events: [{ kind: 'arrived', queueDepth: 0 }], last: { kind: 'try' } },
    { name: 'others waiting: waits behind them (FIFO)', events: [{ kind: 'arrived', queueDepth: 3 }], last: { kind: 'wait', front: false }, state: { queued: true } },
    {
      name: 'nothing free: waits, then runs when a slot is released',
      events: [{ kind: 'arrived', queueDepth: 0 }, { kind: 'tried', placed: false, routeLeft: true }, { kind: 'waited', how: 'placed' }],
      last: { kind: 'run' },
      state: { queued: true },
    },
    { name: 'no queue (queue_max 0): nothing free is 429 at once', events: [{ kind: 'tried', placed: false, routeLeft: true }], rules: { queueMax: 0, forwardRetry: 1 }, last: { kind: 'fail', failure: 'queue-full' } },
    { name: 'a full queue is 429', events: [{ kind: 'waited', how: 'full' }], last: { kind: 'fail', failure: 'queue-full' } },
    { name: 'a marked refusal is retried at once', events: [refusedFull], from: S(), last: { kind: 'try' }, state: { retries: 1, refused: true, front: true } },
    {
      name: 'refused past forward_retry: back to the head of the queue',
      events: [refusedFull, refusedFull],
      last: { kind: 'wait', front: true },
      state: { retries: 0, refused: true, front: true, queued: true },
    },
    {
      name: 'a retry that finds nothing free waits at the head',
      events: [refusedFull, { kind: 'tried', placed: false, routeLeft: true }],
      last: { kind: 'wait', front: true },
    },
    { name: 'deadline with no refusal meanwhile: 429', events: [{ kind: 'waited', how: 'timeout' }], last: { kind: 'fail', failure: 'queue-timeout' } },
    { name: 'deadline after a refused forward: 503', events: [refusedFull, refusedFull, { kind: 'waited', how: 'timeout' }], last: { kind: 'fail', failure: 'queue-timeout-refused' } },
    {
      name: 'a forward that waited at a full executor as long as it could is retried, and its deadline stays a 429',
      events: [waitedOut, waitedOut, { kind: 'waited', how: 'timeout' }],
      last: { kind: 'fail', failure: 'queue-timeout' },
    },
    { name: 'a forward sent back for its eviction is priced again at once', events: [sentBack], from: S(), last: { kind: 'try' }, state: { retries: 1, refused: false, front: true } },
    {
      name: 'a forward sent back for its eviction had a slot there: its deadline stays a 429',
      events: [sentBack, sentBack, { kind: 'waited', how: 'timeout' }],
      last: { kind: 'fail', failure: 'queue-timeout' },
    },
    { name: 'an answer of any status ends it (no retry)', events: [{ kind: 'ran', outcome: { kind: 'answered', status: 429 } }], last: { kind: 'end' } },
    { name: 'the client leaving ends it', events: [{ kind: 'waited', how: 'aborted' }], last: { kind: 'end' } },
    {
      name: 'an engine failure excludes that host and tries another at once',
      events: [{ kind: 'ran', outcome: { kind: 'engine-failed', host: 'B', text: 'boom' } }],
      last: { kind: 'try' },
      state: { failed: ['B'], engineError: 'boom', refused: true },
    },
    {
      name: 'an engine failure with no route left is 502',
      events: [{ kind: 'ran', outcome: { kind: 'engine-failed', host: 'B', text: 'boom' } }, { kind: 'tried', placed: false, routeLeft: false }],
      last: { kind: 'fail', failure: 'engine-failed' },
    },
    {
      name: 'an engine failure with another host busy: waits for it',
      events: [{ kind: 'ran', outcome: { kind: 'engine-failed', host: 'B', text: 'boom' } }, { kind: 'tried', placed: false, routeLeft: true }],
      last: { kind: 'wait', front: true },
    },
    {
      name: 'placed from the queue, the retry budget starts again',
      events: [refusedFull, refusedFull, { kind: 'waited', how: 'placed' }, refusedFull],
      last: { kind: 'try' },
      state: { retries: 1 },
    },
  ];
  for (const row of table) {
    it(row.name, () => {
      const { actions, state } = drive(row.events, row.from, row.rules);
      assert.deepEqual(actions.at(-1), row.last);
      for (const [k, v] of Object.entries(row.state ?? {})) assert.deepEqual(state[k as keyof EntryState], v, k);
    });
  }
});

describe('what an executor’s answer means to the entry node', () => {
  const table: [number, Record<string, string>, 'answer' | 'refused'][] = [
    [429, { 'x-viiwork-refused': 'full' }, 'refused'],
    [429, { 'x-viiwork-refused': 'waited' }, 'refused'],
    [503, { 'x-viiwork-refused': 'workload' }, 'refused'],
    [401, { 'x-viiwork-refused': 'auth' }, 'refused'],
    [502, { 'x-viiwork-refused': 'engine' }, 'refused'],
    [429, {}, 'answer'],
    [401, {}, 'answer'],
    [403, {}, 'answer'],
    [400, {}, 'answer'],
    [503, {}, 'answer'],
    [500, {}, 'answer'],
    [200, {}, 'answer'],
    [429, { 'x-viiwork-refused': 'something-else' }, 'answer'],
  ];
  for (const [status, headers, verdict] of table) {
    it(`${status} ${JSON.stringify(headers)} is ${verdict === 'answer' ? 'the answer, relayed once' : 'a refusal, retried'}`, () => {
      assert.equal(forwardVerdict(status, headers), verdict);
    });
  }
});
