/**
 * Room kept for interactive work (docs/decisions.md, "Room for interactive
 * turns"). Order alone cannot keep an agent's turn quick beside a batch
 * flood: when every slot runs a batch request, the turn that outranks them
 * all still waits for the next one to end. So while a model has served
 * interactive requests on this node recently, batch requests may not take
 * the last free slots of its targets: as many as interactive requests ran
 * here at once lately beyond those running now, and at least
 * `routing.interactive_reserve`. Interactive requests take any free slot. A
 * target never holds back all its slots, and one whose model saw no
 * interactive request for `routing.interactive_reserve_for` holds back none,
 * so a batch-only fleet runs at full width.
 *
 * Pure functions over plain values, and the book that keeps the few numbers
 * they read: the gate (gate.ts) applies them to this node's slots, the
 * report publishes what a target holds back, and an entry subtracts it from
 * a host's free slots for its batch requests (route/eligibility.ts).
 */
import type { Band } from './fair.ts';

export interface ReserveRule {
  /** The fewest free slots per target held back from batch while interactive work is recent (routing.interactive_reserve). */
  slots: number;
  /** How long after its last interactive request a target keeps them (routing.interactive_reserve_for), ms. */
  forMs: number;
}

/** What the rule reads of a model's interactive work on this node. */
export interface InteractiveRecord {
  /** Clock ms of the last interactive request that asked for a slot. */
  lastAt: number;
  /** Interactive requests holding a slot now. */
  running: number;
  /** The most that held slots at once within the window (reset to `running` once it is older). */
  peak: number;
}

/**
 * Free slots of a target with `slots` healthy slots held back from batch now:
 * room for the interactive requests that ran here at once lately beyond
 * those running now, at least the rule's slots; never all of the target's;
 * none outside the window or without a record.
 */
export function heldBack(rule: ReserveRule, slots: number, rec: InteractiveRecord | undefined, now: number): number {
  if (rule.slots <= 0 || rec === undefined || now - rec.lastAt >= rule.forMs) return 0;
  return Math.min(Math.max(rule.slots, rec.peak - rec.running), Math.max(0, slots - 1));
}

/** May a request of `band` take one of `free` slots of which `held` are held back from batch? */
export function mayTakeSlot(band: Band, free: number, held: number): boolean {
  return band === 'batch' ? free > held : free > 0;
}

interface Entry extends InteractiveRecord {
  peakAt: number;
  /** Clock ms of the last batch request that asked for a slot here (undefined: none). */
  batchAt?: number;
}

/** Each model's interactive work on this node: when it last asked, how many run now, the recent peak. */
export class ReserveBook {
  readonly #models = new Map<string, Entry>();

  /** `rule` is read at each use: a reloaded config takes effect at once. */
  constructor(
    private readonly rule: () => ReserveRule,
    private readonly now: () => number = Date.now,
  ) {}

  #entry(model: string): Entry {
    let e = this.#models.get(model);
    // No interactive request yet: lastAt is -Infinity, outside any window.
    if (!e) this.#models.set(model, (e = { lastAt: -Infinity, running: 0, peak: 0, peakAt: this.now() }));
    return e;
  }

  /** An interactive request asked for a slot of `model` on this node. */
  note(model: string): void {
    if (this.rule().slots > 0) this.#entry(model).lastAt = this.now();
  }

  /** A batch request asked for a slot of `model` on this node: the room is published while such requests come. */
  noteBatch(model: string): void {
    if (this.rule().slots > 0) this.#entry(model).batchAt = this.now();
  }

  /**
   * What the capacity report says a target of `model` holds back: `held`, while batch requests also asked here within
   * the window (entries need it only to place batch work); 0 otherwise, so a fleet without batch work reports nothing new.
   */
  published(model: string, slots: number): number {
    const at = this.#models.get(model)?.batchAt;
    return at !== undefined && this.now() - at < this.rule().forMs ? this.held(model, slots) : 0;
  }

  /** An interactive request took a slot of `model`; call `ended` once when it gives it back. */
  began(model: string): void {
    if (this.rule().slots <= 0) return;
    const e = this.#entry(model);
    const now = this.now();
    e.running++;
    if (e.running >= e.peak || now - e.peakAt >= this.rule().forMs) {
      e.peak = e.running;
      e.peakAt = now;
    }
  }

  ended(model: string): void {
    const e = this.#models.get(model);
    if (e && e.running > 0) e.running--;
  }

  /** The record the rule reads (a peak older than the window counts as what runs now). */
  record(model: string): InteractiveRecord | undefined {
    const e = this.#models.get(model);
    if (!e) return undefined;
    const stale = this.now() - e.peakAt >= this.rule().forMs;
    return { lastAt: e.lastAt, running: e.running, peak: stale ? e.running : e.peak };
  }

  /** Slots held back from batch now, of a target of `model` with `slots` healthy slots. */
  held(model: string, slots: number): number {
    return heldBack(this.rule(), slots, this.record(model), this.now());
  }
}

/** `lease`, counted as an interactive request running on `model` until it is released (once, however often it is called). */
export function trackedLease<L extends { release(): void }>(book: ReserveBook, model: string, lease: L): L {
  book.began(model);
  return beforeRelease(lease, () => book.ended(model));
}

/**
 * `lease` with `fn` run once, at its first release and before the lease's own release (whose listeners then see the
 * count `fn` keeps already settled); later calls only pass on to the lease.
 */
export function beforeRelease<L extends { release(): void }>(lease: L, fn: () => void): L {
  let done = false;
  const release = lease.release;
  return Object.assign({}, lease, {
    release() {
      if (!done) {
        done = true;
        fn();
      }
      release.call(lease);
    },
  });
}
