/**
 * Room kept for interactive work (docs/decisions.md, "Room for interactive
 * turns"). Order alone cannot keep an agent's turn quick beside a batch
 * flood: when every slot runs a batch request, the turn that outranks them
 * all still waits for the next one to end. So while a target has served
 * interactive requests recently, batch requests may not take its last
 * `routing.interactive_reserve` free slots; interactive ones may. A target
 * never holds back all its slots, and one that saw no interactive request
 * for `routing.interactive_reserve_for` holds back none, so a batch-only
 * fleet runs at full width.
 *
 * Pure functions over plain values: the gate (gate.ts) applies them to this
 * node's slots, the report publishes what a target holds back, and an entry
 * subtracts it from a host's free slots for its batch requests
 * (route/eligibility.ts).
 */
import type { Band } from './fair.ts';

export interface ReserveRule {
  /** Slots per target held back from batch while interactive work is recent (routing.interactive_reserve). */
  slots: number;
  /** How long after its last interactive request a target keeps them (routing.interactive_reserve_for), ms. */
  forMs: number;
}

/** Slots of a target with `slots` healthy slots held back from batch now; `lastInteractiveAt` undefined: none seen. */
export function heldBack(rule: ReserveRule, slots: number, lastInteractiveAt: number | undefined, now: number): number {
  if (rule.slots <= 0 || lastInteractiveAt === undefined || now - lastInteractiveAt >= rule.forMs) return 0;
  return Math.min(rule.slots, Math.max(0, slots - 1));
}

/** May a request of `band` take one of `free` slots of which `held` are held back from batch? */
export function mayTakeSlot(band: Band, free: number, held: number): boolean {
  return band === 'batch' ? free > held : free > 0;
}

/** When each model last had an interactive request ask for a slot here: what the rule above reads. */
export class ReserveBook {
  readonly #last = new Map<string, number>();

  /** `rule` is read at each use: a reloaded config takes effect at once. */
  constructor(
    private readonly rule: () => ReserveRule,
    private readonly now: () => number = Date.now,
  ) {}

  /** An interactive request asked for a slot of `model` on this node. */
  note(model: string): void {
    if (this.rule().slots > 0) this.#last.set(model, this.now());
  }

  /** Slots held back from batch now, of a target of `model` with `slots` healthy slots. */
  held(model: string, slots: number): number {
    return heldBack(this.rule(), slots, this.#last.get(model), this.now());
  }
}
