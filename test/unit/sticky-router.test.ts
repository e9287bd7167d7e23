import assert from 'node:assert/strict';
import { test } from 'node:test';
import { StickyRouter } from '../../bench/lib/sticky.ts';

test('the sticky reference arm keeps a conversation on its home engine while that engine has a free slot', () => {
  const r = new StickyRouter([1, 2]);
  const home = r.pick(7);
  r.done(home);
  for (let i = 0; i < 5; i++) {
    assert.equal(r.pick(7), home);
    r.done(home);
  }
});

test('the sticky reference arm sends a turn whose home is full to the least busy engine, and the conversation keeps its home', () => {
  const r = new StickyRouter([1, 1, 1]);
  const home = r.pick(1);
  const other = r.pick(1); // home is full (1 slot, 1 in flight)
  assert.notEqual(other, home);
  r.done(home);
  r.done(other);
  assert.equal(r.pick(1), home);
});

test('the sticky reference arm spreads requests that are not conversations by requests in flight', () => {
  const r = new StickyRouter([2, 2, 2]);
  const picks = [r.pick(undefined), r.pick(undefined), r.pick(undefined)];
  assert.deepEqual([...picks].sort(), [0, 1, 2]);
});
