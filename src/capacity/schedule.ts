/**
 * Which members to poll now (docs/decisions.md, "Capacity polling at
 * scale"). Pure: the poller (poller.ts) calls it on every tick with what it
 * knows and the clock, and sends the polls it names.
 *
 * A member this node routes to (it serves a model this node was asked for
 * lately, or serves here too, or has one of this node's forwards in flight,
 * or its report says it is about to change) is polled every
 * `mesh.capacity_poll`, exactly as before. Every other member is polled every
 * `mesh.capacity_background`: its report is then stale most of the time
 * (SPEC section 7's `stale_after` still decides that, from when its poll was
 * sent), which is right, since nothing here routes to it; it stays listed in
 * /v1/models and the fleet view with its age. A request for one of its
 * models makes it routed at once, and the next tick (which the node runs
 * then and there) polls it.
 */

import type { CapacityReport } from './report.ts';

export interface PollRules {
  /** mesh.capacity_poll: the period of members this node routes to, and of the ticks. */
  intervalMs: number;
  /** mesh.capacity_background: the period of the others (at least intervalMs). */
  backgroundMs: number;
}

export interface MemberPoll {
  name: string;
  /** Polled every intervalMs (see routedMember). */
  routed: boolean;
  /** This node's clock when the last poll to it was sent (answered or not); undefined: never. */
  lastSentAt: number | undefined;
  /** A poll to it is in flight (never two at once, SPEC section 7). */
  inFlight: boolean;
}

/**
 * The members to poll at `now`, in the order to send them.
 *
 * - Never polled: now (a member that has just joined is known at once).
 * - Routed: when a period has passed since the last poll, with half a tick of
 *   slack so timer jitter never pushes a poll to the tick after.
 * - The others: when their background period has passed, oldest first, at
 *   most their fair share per tick (count × intervalMs ÷ backgroundMs, at
 *   least one), so a start or a merge that polled everyone at once spreads
 *   over the following ticks instead of recurring as a burst.
 */
export function duePolls(members: readonly MemberPoll[], now: number, rules: PollRules): string[] {
  const interval = rules.intervalMs;
  const background = Math.max(rules.backgroundMs, interval);
  const slack = interval / 2;
  const due: string[] = [];
  const waiting: MemberPoll[] = [];
  let backgroundCount = 0;
  for (const m of members) {
    if (!m.routed) backgroundCount++;
    if (m.inFlight) continue;
    if (m.lastSentAt === undefined) due.push(m.name);
    else if (m.routed) {
      if (now - m.lastSentAt >= interval - slack) due.push(m.name);
    } else if (now - m.lastSentAt >= background - slack) waiting.push(m);
  }
  const budget = Math.max(1, Math.ceil((backgroundCount * interval) / background));
  waiting.sort((a, b) => a.lastSentAt! - b.lastSentAt! || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  for (const m of waiting.slice(0, budget)) due.push(m.name);
  return due;
}

/** What the node knows of one member when it decides whether it routes to it. */
export interface MemberFacts {
  /** The models of its last report; undefined before the first one. */
  models: readonly string[] | undefined;
  /** Its last report shows a backend loading or not healthy: it is about to change what it can do. */
  unsettled: boolean;
  /** One of this node's forwards to it is in flight (its watchdog needs fresh reports). */
  forwarding: boolean;
}

/**
 * Does this node route to the member (poll it every capacity_poll)? Yes
 * when it serves a model this node wants (asked for lately, or served here
 * too, so a local pick is always weighed against fresh remote ones), when a
 * forward to it is in flight, or when its report is unsettled (a backend
 * loading or down: a stale "down" would answer 503 for a model it may
 * serve again by now). A member without a report is polled at once anyway.
 */
export function routedMember(f: MemberFacts, wanted: (model: string) => boolean): boolean {
  if (f.forwarding || f.unsettled) return true;
  return f.models?.some(wanted) ?? false;
}

/** A backend loading or not healthy in the report: what it can do is about to change. */
export function unsettled(report: CapacityReport): boolean {
  return report.models.some(
    (m) => (m.backends !== undefined && m.healthy_backends !== undefined && m.healthy_backends < m.backends) || (m.targets?.some((t) => (t.loading ?? 0) > 0) ?? false),
  );
}

/**
 * Models asked for lately (mesh.capacity_interest), with the clock passed
 * in: a model stays wanted for `windowMs` after its last request.
 */
export class Interest {
  readonly #last = new Map<string, number>();

  constructor(
    private readonly windowMs: number,
    private readonly now: () => number,
  ) {}

  /** A request for `model` arrived (or waits). Returns true when the model was not wanted until now. */
  note(model: string): boolean {
    const now = this.now();
    const was = this.has(model);
    this.#last.set(model, now);
    return !was;
  }

  has(model: string): boolean {
    const at = this.#last.get(model);
    if (at === undefined) return false;
    if (this.now() - at <= this.windowMs) return true;
    this.#last.delete(model);
    return false;
  }

  /** Forget models not asked for within the window (bounds the map by the models asked lately). */
  prune(): void {
    const now = this.now();
    for (const [model, at] of this.#last) if (now - at > this.windowMs) this.#last.delete(model);
  }
}
