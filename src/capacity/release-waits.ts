/**
 * GET /v1/capacity?wait= (docs/decisions.md, "Capacity polling at scale"):
 * a member's poll held open until a slot of the model frees here, so the
 * member learns of it at once instead of at its next poll. Bounded: past
 * MAX_RELEASE_WAITERS held polls, a poll is answered at once.
 */
import type { SlotTable } from '../engines/targets.ts';

/** Capacity polls held open at once waiting for a slot to free. */
export const MAX_RELEASE_WAITERS = 512;

export class ReleaseWaits {
  #waiters = 0;

  constructor(
    private readonly slots: Pick<SlotTable, 'hasFree' | 'models' | 'onRelease'>,
    private readonly max = MAX_RELEASE_WAITERS,
  ) {}

  /** Resolves when a slot of `model` is released here; at once when one is free now, the model is not served here, or too many wait; else after `ms`. */
  released(model: string, ms: number): Promise<void> {
    if (this.slots.hasFree(model) || !this.slots.models().includes(model) || this.#waiters >= this.max) return Promise.resolve();
    this.#waiters++;
    return new Promise((resolve) => {
      let settled = false;
      const done = () => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        off();
        this.#waiters--;
        resolve();
      };
      const timer = setTimeout(done, ms);
      // Any release: a released slot of another model answers too early, harmlessly (the report says what is free).
      const off = this.slots.onRelease(() => setImmediate(done));
    });
  }
}
