/**
 * This node's interest in its members' reports (docs/decisions.md,
 * "Capacity polling at scale"): which members it routes to (polled every
 * capacity_poll, schedule.ts decides when), which models it was asked for
 * lately, and, while requests wait here, which full or loading members to
 * ask for an answer as soon as a slot frees. The node runs `noteAsked` and
 * `hurry` on its tick and after each report; the poller asks `routesTo`.
 */
import { candidates, type CandidateInputs } from '../route/eligibility.ts';
import type { HostView } from '../route/types.ts';
import type { CapacityPoller, PeerReport } from './poller.ts';
import { Interest, routedMember, unsettled } from './schedule.ts';

/** How long a member may hold a slot-waiting poll from this node. */
const SLOT_WAIT_MS = 1000;

/** What the interest schedule reads of the node, and the poller it drives. */
export interface InterestPorts {
  /** This node's name: only requests that entered here count as asked. */
  readonly self: string;
  /** mesh.capacity_interest, ms: a model stays wanted this long after its last request. */
  readonly windowMs: number;
  now(): number;
  /** Models served here (a local pick is always weighed against fresh remote ones). */
  localModels(): readonly string[];
  /** This node's forwards (forward/book.ts): in flight, their tallies and refusal marks. */
  readonly forwards: { inFlight(host: string, model: string): boolean; readonly tally: CandidateInputs['forwards']; readonly marks: CandidateInputs['marks'] };
  /** The decision feed (dispatch/decisions.ts): requests ended since a sequence number, and the last one. */
  readonly decisions: { since(seq: number): readonly { entry: string; model: string; outcome: string }[]; readonly last: number };
  /** This node's queues with their depth. */
  waiting(): readonly { model: string; workload: string; depth: number }[];
  /** The routing snapshot of this moment. */
  snapshot(): readonly HostView[];
  /** A member's API address, when known. */
  apiOf(host: string): string | undefined;
  /** The poller, once the mesh is up. */
  poller(): Pick<CapacityPoller, 'pollDue' | 'waitForSlot'> | undefined;
}

export class PollInterest {
  /** Models asked for at this node lately: their hosts are polled every capacity_poll. */
  readonly #interest: Interest;
  /** The last decision `noteAsked` has read. */
  #seenDecision = 0;

  constructor(private readonly p: InterestPorts) {
    this.#interest = new Interest(p.windowMs, p.now);
  }

  /** Does this node route to the member, so it polls it every capacity_poll (else every capacity_background)? */
  routesTo(name: string, r: PeerReport | undefined): boolean {
    // No report yet (just joined, or never answered): keep asking every capacity_poll, as for any member before.
    if (!r) return true;
    const models = r.report.models.map((m) => m.name);
    const local = this.p.localModels();
    const forwarding = models.some((m) => this.p.forwards.inFlight(name, m));
    return routedMember({ models, unsettled: unsettled(r.report), forwarding }, (m) => local.includes(m) || this.#interest.has(m));
  }

  /**
   * Models asked for here since the last look (the decision feed; only
   * requests that entered here): their hosts stay polled every
   * capacity_poll. A model newly wanted has its hosts polled at once.
   */
  noteAsked(): void {
    let newly = false;
    for (const d of this.p.decisions.since(this.#seenDecision)) if (d.entry === this.p.self && d.outcome !== '404') newly = this.#interest.note(d.model) || newly;
    this.#seenDecision = this.p.decisions.last;
    this.#interest.prune();
    if (newly) this.p.poller()?.pollDue();
  }

  /**
   * While requests wait here, ask every member they could run on but that
   * this node sees full (its report, its refusal) or still loading the model
   * to answer its next report as soon as one of its slots frees or its load
   * ends: a slot freed by another entry node's forward, or a model just
   * loaded, is then used at once instead of at the next poll.
   */
  hurry(): void {
    const poller = this.p.poller();
    if (!poller) return;
    const waiting = this.p.waiting().filter((q) => q.depth > 0);
    if (waiting.length === 0) return;
    // A request waiting for a model whose hosts were polled slowly (their reports stale): poll them now, and
    // every capacity_poll from now on, so it waits one poll for them rather than a background interval.
    if (waiting.map((q) => this.#interest.note(q.model)).some(Boolean)) poller.pollDue();
    const hosts = this.p.snapshot();
    const forwards = this.p.forwards;
    for (const q of waiting) {
      for (const c of candidates({ hosts, forwards: forwards.tally, marks: forwards.marks }, q.model, q.workload)) {
        // Full, or still loading (an on-demand load): its answer comes when a slot frees or the load ends.
        if (c.local || !c.fresh || c.free > 0 || !(c.healthy || c.loading)) continue;
        const api = this.p.apiOf(c.host);
        if (api) poller.waitForSlot({ name: c.host, api }, q.model, SLOT_WAIT_MS);
      }
    }
  }
}
