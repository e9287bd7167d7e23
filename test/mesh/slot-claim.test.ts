/**
 * Issue 42, item 4: an entry prices a member's slots from a digest up to a
 * poll old, and names the slot it priced in the forward (the `slot` claim,
 * signed with it). The executor takes that slot when it is idle and costs no
 * more there than its own choice, so the cached tokens the entry predicted
 * are the ones the engine reuses; a slot that would cost more (a live
 * conversation sharing nothing) is not taken, and without the claim the
 * executor chooses alone, as before.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startClaimPair, type ClaimPair } from '../helpers/claim-pair.ts';
import { getJson, stopAll } from '../helpers/mesh.ts';

// A system prompt of about 1,000 tokens (4 bytes a token), shared by the conversations below.
const SYSTEM = 'You are the shared agent of this repository. '.repeat(90);

const chat = (system: string, user: string) => JSON.stringify({ model: 'm', max_tokens: 2, messages: [{ role: 'system', content: system }, { role: 'user', content: user }] });

interface Ran {
  cached: number;
  prompt: number;
  slot?: number;
}

describe('an executor takes the slot its entry priced when it costs no more there', () => {
  let pair: ClaimPair;
  let seen = 0;
  // Three slots: the executor knows exactly what each holds.
  before(async () => {
    pair = await startClaimPair(151, 3);
  });
  after(() => stopAll([pair.entry, pair.exec]));

  /** One signed forward from `entry`; what the engine reused and the slot the executor's decision row names. */
  async function forward(body: string, claims?: string): Promise<Ran> {
    const { status, text } = await pair.forward(body, claims);
    assert.equal(status, 200, text);
    const usage = JSON.parse(text).usage;
    const feed = await getJson<{ last: number; data: { slot?: number }[] }>(`${pair.exec.url}/v1/decisions?since=${seen}`);
    seen = feed.last;
    assert.equal(feed.data.length, 1, JSON.stringify(feed.data));
    return { cached: usage.prompt_tokens_details?.cached_tokens ?? 0, prompt: usage.prompt_tokens, slot: feed.data[0].slot };
  }

  it('takes the named slot holding the shared system prompt over an empty one, and reuses it', async () => {
    const a = await forward(chat(SYSTEM, 'first conversation'));
    assert.ok(a.slot !== undefined, 'the decision row names the slot');
    // Alone, the executor keeps the live conversation's slot while an empty one exists: the second starts cold.
    const b = await forward(chat(SYSTEM, 'second conversation'));
    assert.notEqual(b.slot, a.slot);
    assert.ok(b.cached < 0.1 * b.prompt, `without the claim it reused ${b.cached} of ${b.prompt}`);
    // Its entry priced the first conversation's slot (losing only that conversation's last message, keeping the
    // system prompt): taken, though an empty slot is left, and the system prompt is reused.
    const c = await forward(chat(SYSTEM, 'third conversation'), `slot=${a.slot}`);
    assert.equal(c.slot, a.slot);
    assert.ok(c.cached >= 0.9 * (a.prompt - 10), `the named slot reused ${c.cached} of ${c.prompt}`);
  });

  it('does not take a named slot whose live conversation shares nothing with the prompt', async () => {
    const other = await forward(chat('You are another agent entirely. '.repeat(90), 'its own conversation'));
    // The only empty slot went to it; now every slot holds a live conversation. A prompt sharing nothing names it.
    const d = await forward(chat('A stranger with a prompt of its own. '.repeat(90), 'hello'), `slot=${other.slot}`);
    assert.notEqual(d.slot, other.slot, 'the named slot would have destroyed a live conversation of a thousand tokens');
  });
});
