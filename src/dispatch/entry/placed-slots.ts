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

export const PLACED_PER_HOST = 16;
export const PLACED_MAX_AGE_MS = 60_000;

interface Placed {
  at: number;
  slot: PlacedSlot;
}

/** One recorded forward: tell it how it ended. */
export interface PlacedHandle {
  /** `served`: its prompt stays in the slot, idle from now. `refused`: it never ran there; forgotten. */
  end(how: 'served' | 'refused'): void;
}

export class PlacedSlots {
  /** host \0 model → forwards, oldest first. */
  readonly #byHost = new Map<string, Placed[]>();

  constructor(private readonly now: () => number) {}

  /** A forward of `chain` (head link at `head`, when known) was just sent to `host`, priced in its slot `slot`. */
  record(host: string, model: string, slot: number, chain: PrefixChain, head?: number): PlacedHandle | undefined {
    if (chain.length === 0) return undefined;
    const now = this.now();
    const key = `${host}\0${model}`;
    let list = this.#byHost.get(key);
    if (!list) this.#byHost.set(key, (list = []));
    let old = 0;
    while (old < list.length && now - list[old].at > PLACED_MAX_AGE_MS) old++;
    const last = chain[chain.length - 1];
    const h = head !== undefined && head >= 0 && head < chain.length - 1 ? chain[head] : undefined;
    const entry: Placed = { at: now, slot: h ? { slot, last, head: h } : { slot, last } };
    list.push(entry);
    const over = Math.max(old, list.length - PLACED_PER_HOST);
    if (over > 0) list.splice(0, over);
    if (this.#byHost.size > 4 * PLACED_PER_HOST) for (const [k, l] of this.#byHost) if (l.every((p) => now - p.at > PLACED_MAX_AGE_MS)) this.#byHost.delete(k);
    return {
      end: (how) => {
        if (how === 'served') {
          if (entry.slot.endedAt === undefined) entry.slot = { ...entry.slot, endedAt: this.now() };
          return;
        }
        const kept = this.#byHost.get(key);
        const i = kept ? kept.indexOf(entry) : -1;
        if (i >= 0) kept!.splice(i, 1);
      },
    };
  }

  /** The slots this node's forwards took on `host` for `model` at or after `since`, oldest first. */
  since(host: string, model: string, since: number): PlacedSlot[] {
    const list = this.#byHost.get(`${host}\0${model}`);
    if (!list) return [];
    const out: PlacedSlot[] = [];
    for (const p of list) if (p.at >= since) out.push(p.slot);
    return out;
  }
}
