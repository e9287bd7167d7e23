/**
 * Issue 25: an executor sends back a forward whose slot here would destroy a
 * live conversation's cached prompt that its entry priced as free (the
 * `evict` claim, signed with the forward), so the entry prices it again on
 * fresher terms; a forward whose eviction was priced, or one that continues
 * the slot's conversation, or one without the claim (an older entry, a
 * pinned request) runs as before.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startClaimPair, type ClaimPair } from '../helpers/claim-pair.ts';
import { stopAll } from '../helpers/mesh.ts';

// A system prompt and a first turn of a few thousand tokens (4 bytes a token): worth far more than the slack.
const SYSTEM = 'You are a careful coding agent. '.repeat(200);

function turn(conversation: string, turns: string[]): string {
  const messages: { role: string; content: string }[] = [{ role: 'system', content: SYSTEM }];
  turns.forEach((t, i) => {
    messages.push({ role: 'user', content: `${conversation}: ${t} `.repeat(120) });
    if (i < turns.length - 1) messages.push({ role: 'assistant', content: `done with ${t}` });
  });
  return JSON.stringify({ model: 'm', messages, max_tokens: 2 });
}

describe('an executor sends back a forward that would evict a live conversation its entry priced as free', () => {
  let pair: ClaimPair;
  // One slot: the executor knows exactly what it holds.
  before(async () => {
    pair = await startClaimPair(122, 1);
  });
  after(() => stopAll([pair.entry, pair.exec]));

  it('sends it back marked, runs the priced one, the continuation and the unclaimed one', async () => {
    const a1 = await pair.forward(turn('alpha', ['one']));
    assert.equal(a1.status, 200, a1.text);

    // Alpha just ended its turn (live); beta's entry saw the slot empty and priced nothing.
    const b1 = await pair.forward(turn('beta', ['one']), 'evict=0');
    assert.equal(b1.status, 429, b1.text);
    assert.equal(b1.refused, 'evicts');
    assert.match(JSON.parse(b1.text).error.message, /would evict a live conversation's cached prompt .* the entry node prices it again/);

    // Alpha's next turn continues its slot: nothing is destroyed, whatever was priced.
    const a2 = await pair.forward(turn('alpha', ['one', 'two']), 'evict=0');
    assert.equal(a2.status, 200, a2.text);

    const b2 = await pair.forward(turn('beta', ['one']), 'evict=0');
    assert.equal(b2.refused, 'evicts', 'alpha is still live');
    // Priced in full (the entry's retry prices the slot's conversation as live): it runs.
    const b3 = await pair.forward(turn('beta', ['one']), 'evict=100000');
    assert.equal(b3.status, 200, b3.text);
    // Without the claim (an older entry, a pinned request, no retry left) it runs as before.
    const a3 = await pair.forward(turn('alpha', ['one', 'two', 'three']));
    assert.equal(a3.status, 200, a3.text);
  });
});
