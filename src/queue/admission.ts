/**
 * Who gets a slot of this node when forwards wait for one here (SPEC
 * sections 9 and 12; docs/decisions.md, "Fairness across entry nodes").
 *
 * Queues are per entry node, so an entry's priority bands and virtual token
 * counters (fair.ts) order only its own waiters. A slot that frees on a host
 * would otherwise go to that host's own waiters at once, whatever waits
 * elsewhere. So a forward that finds this node full may wait here, in a
 * short line of its own per model, and every grant of a slot here — to a
 * request entering here or to a forward — is ordered by the same rule:
 * band first, then the key with the least weighted service here (one
 * counter per key for this node's slots), then arrival.
 *
 * Pure functions over plain values; the gate (gate.ts) holds the state.
 */
import { BANDS, type Flow } from './fair.ts';

/** What ranking needs of a claimant. */
export type Claimant = Pick<Flow, 'key' | 'band'>;

const rank = (f: Claimant) => BANDS.indexOf(f.band);

/**
 * Does `a` come strictly before `b`: a higher band, or the same band and
 * less service counted (a tie is not "before": the one already waiting keeps
 * its turn).
 */
export function outranks(a: Claimant, b: Claimant, counters: ReadonlyMap<string, number>): boolean {
  const r = rank(a) - rank(b);
  if (r !== 0) return r < 0;
  return (counters.get(a.key) ?? 0) < (counters.get(b.key) ?? 0);
}

/**
 * May `flow` take a free slot now, with `waiting` in the line for the same
 * work? Unless one of them comes strictly before it. A tie goes to the
 * request asking here: it is already on this node, and for the same key (or
 * keys served alike) it makes no difference to fairness who runs, only to
 * how much crosses the network.
 */
export function mayTake(flow: Claimant, waiting: readonly Claimant[], counters: ReadonlyMap<string, number>): boolean {
  for (const w of waiting) if (outranks(w, flow, counters)) return false;
  return true;
}

export type LineVerdict =
  /** Room in the line: wait there. */
  | { kind: 'join' }
  /** The line is full, but the waiter at `index` ranks below this one: it leaves (refused, to wait at its entry again) and this one joins. */
  | { kind: 'displace'; index: number }
  /** The line is full of waiters that rank at least as high: refused at once. */
  | { kind: 'full' };

/**
 * A forward that found no free slot asks to wait: it joins while the line
 * has room; when it is full, it takes the place of the waiter that ranks
 * last (the latest of the lowest), if this one outranks it.
 */
export function lineVerdict(waiting: readonly Claimant[], flow: Claimant, max: number, counters: ReadonlyMap<string, number>): LineVerdict {
  if (waiting.length < max) return { kind: 'join' };
  let last = -1;
  for (let i = 0; i < waiting.length; i++) if (last < 0 || !outranks(waiting[i], waiting[last], counters)) last = i;
  return last >= 0 && outranks(flow, waiting[last], counters) ? { kind: 'displace', index: last } : { kind: 'full' };
}
