/**
 * How many turns a conversation has had on this backend (session 32, issue
 * 42 item 2): the route prices an idle slot's return chance by them
 * (route/slots.ts returnShares). Counted by the conversation, not by the
 * slot: a turn that comes back to another slot of the backend (its own was
 * taken meanwhile) is still its conversation's next, so a conversation
 * that moves between slots is not mistaken for a new one, and priced as
 * one that seldom returns.
 *
 * A prompt continues an earlier one when its chain holds that prompt's last
 * link (the whole earlier prompt is its prefix), or its link before the
 * last when that lies past the head (the earlier prompt's last message, or
 * last 1 KiB, grew since: prompt/held.ts continuesInPlace). The head itself
 * (tools and system) is never a key: conversations that share only it are
 * others.
 *
 * Bounded: the most recent MAX_PROMPTS prompts are remembered.
 */
import type { PrefixChain } from '../prompt/held.ts';

/** Prompts remembered at most (two map entries each at most). */
export const MAX_PROMPTS = 4096;

export class TurnCount {
  /** Link hash → turns of the conversation whose prompt ended (or ended but one) there; insertion order is recency. */
  readonly #turns = new Map<string, number>();

  /**
   * The turns of the conversation a prompt with `chain` (head link at index `head`, when known) is the next of,
   * counting this one; and remembers it.
   */
  next(chain: PrefixChain, head?: number): number {
    let turns = 1;
    for (let i = chain.length - 1; i >= 0; i--) {
      const t = this.#turns.get(chain[i].hash);
      if (t !== undefined) {
        turns = t + 1;
        break;
      }
    }
    const last = chain.length - 1;
    if (last < 0) return turns;
    this.#remember(chain[last].hash, turns);
    if (head !== undefined && head >= 0 && last - 1 > head) this.#remember(chain[last - 1].hash, turns);
    return turns;
  }

  #remember(hash: string, turns: number): void {
    this.#turns.delete(hash);
    this.#turns.set(hash, turns);
    if (this.#turns.size > 2 * MAX_PROMPTS) this.#turns.delete(this.#turns.keys().next().value as string);
  }
}
