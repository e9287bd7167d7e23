/**
 * An entry's record of the slots its forwards took on a member (issue 42,
 * item 4): what it sent since the member's last poll goes in the slot its
 * price named; what it sent before and has ended since is handed back too,
 * marked, so the slot the poll saw it running in is priced idle.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { PlacedSlots } from '../../src/dispatch/entry/placed-slots.ts';
import type { PrefixChain } from '../../src/prompt/held.ts';

const chain = (tag: string): PrefixChain => [
  { hash: `${tag}-head`, tokens: 100 },
  { hash: `${tag}-last`, tokens: 150 },
];

describe("an entry's record of the slots its forwards took", () => {
  it('hands back forwards sent since the poll as placed, and earlier ones that ended since as polled; one still running before the poll is left to the digest', () => {
    let now = 0;
    const book = new PlacedSlots(() => now);
    now = 10;
    const ran = book.record('h', 'm', 0, chain('a'), 0)!;
    now = 20;
    book.record('h', 'm', 1, chain('b'), 0);
    now = 30;
    ran.end('served');
    now = 40;
    const after = book.record('h', 'm', 1, chain('c'), 0)!;
    // Polled at 25: a was running then (sent at 10, ended at 30), b still runs, c was sent after.
    const got = book.since('h', 'm', 25);
    assert.deepEqual(
      got.map((p) => [p.last.hash, p.polled ?? false, p.endedAt]),
      [
        ['a-last', true, 30],
        ['c-last', false, undefined],
      ],
    );
    after.end('refused');
    assert.deepEqual(book.since('h', 'm', 25).map((p) => p.last.hash), ['a-last'], 'a refused forward never ran there: forgotten');
    assert.deepEqual(book.since('h', 'other', 25), [], 'per model');
  });

  it('puts a served forward in the slot the executor said it took, when that is not the one the price named', () => {
    let now = 0;
    const book = new PlacedSlots(() => now);
    const sent = book.record('h', 'm', 0, chain('a'), 0)!;
    now = 5;
    sent.end('served', 1);
    assert.deepEqual(book.since('h', 'm', 0).map((p) => [p.slot, p.endedAt]), [[1, 5]]);
  });
});
