/** capacity/fresh.ts: which members a request about to be refused polls first (issue 28, item 7). */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { membersToRefresh } from '../../src/capacity/fresh.ts';

const peers = [
  { name: 'old', state: 'alive', api: 'http://127.0.0.2:8086' },
  { name: 'new', state: 'alive', api: 'http://127.0.0.3:8086' },
  { name: 'never', state: 'alive', api: 'http://127.0.0.4:8086' },
  { name: 'gone', state: 'dead', api: 'http://127.0.0.5:8086' },
  { name: 'quiet', state: 'suspect', api: 'http://127.0.0.6:8086' },
  { name: 'noapi', state: 'alive' },
];
const polled: Record<string, number> = { old: 1_000, new: 9_500, gone: 0, quiet: 0, noapi: 0 };
const last = (n: string) => polled[n];

describe('membersToRefresh', () => {
  it('a refusal polls the alive members heard from longer ago than stale_after, or never', () => {
    assert.deepEqual(membersToRefresh(peers, last, 10_000, 3_000), ['old', 'never']);
  });
  it('a pin polls the pinned member only, and only when its report is stale', () => {
    assert.deepEqual(membersToRefresh(peers, last, 10_000, 3_000, 'old'), ['old']);
    assert.deepEqual(membersToRefresh(peers, last, 10_000, 3_000, 'new'), []);
    assert.deepEqual(membersToRefresh(peers, last, 10_000, 3_000, 'gone'), []);
    assert.deepEqual(membersToRefresh(peers, last, 10_000, 3_000, 'nobody'), []);
  });
  it('a report exactly stale_after old is still fresh', () => {
    assert.deepEqual(membersToRefresh(peers, last, 4_000, 3_000, 'old'), []);
  });
});
