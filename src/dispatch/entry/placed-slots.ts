/**
 * The slots this entry's forwards took on members, as its price named them
 * (route/warmth.ts `PlacedSlot`): until a member's next report, its digest
 * shows those slots as they were at the poll, and pricing puts the
 * forwards' prompts in them, so the next request is priced on the slots the
 * executor holds now (issue 42, item 4).
 *
 * Bounded: PLACED_PER_HOST records per (host, model), none older than
 * PLACED_MAX_AGE_MS (a report polls far more often than that).
 */
import type { PrefixChain } from '../../prompt/held.ts';
import type { PlacedSlot } from '../../route/warmth.ts';
import { HostRecords } from './host-records.ts';

export const PLACED_PER_HOST = 16;
export const PLACED_MAX_AGE_MS = 60_000;

interface Placed {
  readonly at: number;
  slot: PlacedSlot;
}

/** One recorded forward: tell it how it ended. */
export interface PlacedHandle {
  /**
   * `served`: its prompt stays in the slot, idle from now; in `slot` when the executor said it took another than the
   * one named. `refused`: it never ran there; forgotten.
   */
  end(how: 'served' | 'refused', slot?: number): void;
}

export class PlacedSlots {
  readonly #records = new HostRecords<Placed>(PLACED_PER_HOST, PLACED_MAX_AGE_MS);

  constructor(private readonly now: () => number) {}

  /** A forward of `chain` (head link at `head`, when known) was just sent to `host`, priced in its slot `slot`. */
  record(host: string, model: string, slot: number, chain: PrefixChain, head?: number): PlacedHandle | undefined {
    if (chain.length === 0) return undefined;
    const now = this.now();
    const last = chain[chain.length - 1];
    const h = head !== undefined && head >= 0 && head < chain.length - 1 ? chain[head] : undefined;
    const entry: Placed = { at: now, slot: h ? { slot, last, head: h } : { slot, last } };
    const forget = this.#records.add(host, model, entry, now);
    return {
      end: (how, took) => {
        if (how === 'refused') return forget();
        if (entry.slot.endedAt === undefined) entry.slot = { ...entry.slot, endedAt: this.now(), ...(took !== undefined ? { slot: took } : {}) };
      },
    };
  }

  /**
   * The slots this node's forwards took on `host` for `model` at or after `since`, oldest first; before them, those
   * sent earlier that have ended (marked `polled`: a report polled at `since` shows where they ran, maybe still busy).
   */
  since(host: string, model: string, since: number): PlacedSlot[] {
    const out: PlacedSlot[] = [];
    for (const p of this.#records.of(host, model)) {
      if (p.at >= since) out.push(p.slot);
      else if (p.slot.endedAt !== undefined) out.push(Object.assign({}, p.slot, { polled: true as const }));
    }
    return out;
  }
}
