/**
 * This node's targets: backends grouped by (model, descriptor), with the
 * slot table. A lease is taken synchronously (so two requests can never get
 * the same last slot) and released exactly once.
 */
import type { Backend } from './backend.ts';
import { rendezvousRank } from '../hashing/rendezvous.ts';
import { nextMeanBusy, releaseEstimate } from './release.ts';
import { beforeRelease } from '../queue/reserve.ts';
import { descriptorDoes, descriptorKey, type Descriptor, type Workload } from '../workloads/workloads.ts';

export interface LocalTarget {
  readonly model: string;
  readonly descriptor: Descriptor;
  readonly backends: readonly Backend[];
}

export interface Lease {
  readonly backend: Backend;
  readonly target: LocalTarget;
  /** performance.now() when the slot was granted. */
  readonly grantedAt: number;
  release(): void;
}

export interface TargetSummary {
  descriptor: Descriptor;
  slots: number;
  busy: number;
  /** Backends still loading (they count as full: requests wait for them). */
  loading: number;
}

export class SlotTable {
  readonly #busy = new Map<Backend, number>();
  readonly #listeners = new Set<() => void>();
  /** When each running lease of a backend was granted (performance.now()), for release_ms. */
  readonly #running = new Map<Backend, Set<{ at: number }>>();
  /** Each backend's recent mean lease time, ms. */
  readonly #meanBusy = new Map<Backend, number>();
  /** performance.now() of each backend's last lease or release: how long it has been idle (on-demand unloading). */
  readonly #lastUsed = new Map<Backend, number>();
  #targets: LocalTarget[] = [];
  /** Slots held by each member's forwards, by (member, model, descriptor): a regrouping makes new targets, the count stays. */
  readonly #ofMembers = new Map<string, number>();
  /** The models and each one's targets, made once per regrouping (read on every routing decision). */
  #models: readonly string[] = [];
  #byModel = new Map<string, readonly LocalTarget[]>();

  constructor(backends: readonly Backend[] = []) {
    this.setBackends(backends);
  }

  /** Regroup after a backend's descriptor changed or backends were replaced (SIGHUP). Busy counts are kept. */
  setBackends(backends: readonly Backend[]): void {
    const groups = new Map<string, LocalTarget & { backends: Backend[] }>();
    for (const b of backends) {
      const key = `${b.info.model}\0${descriptorKey(b.descriptor)}`;
      let g = groups.get(key);
      if (!g) groups.set(key, (g = { model: b.info.model, descriptor: b.descriptor, backends: [] }));
      g.backends.push(b);
      if (!this.#busy.has(b)) this.#busy.set(b, 0);
    }
    for (const b of [...this.#busy.keys()])
      if (!backends.includes(b) && this.#busy.get(b) === 0) {
        this.#busy.delete(b);
        this.#lastUsed.delete(b);
        this.#running.delete(b);
        this.#meanBusy.delete(b);
      }
    this.#targets = [...groups.values()].sort((a, c) =>
      a.model === c.model ? descriptorKey(a.descriptor).localeCompare(descriptorKey(c.descriptor)) : a.model < c.model ? -1 : 1,
    );
    this.#models = [...new Set(this.#targets.map((t) => t.model))];
    this.#byModel = new Map(this.#models.map((m) => [m, this.#targets.filter((t) => t.model === m)]));
  }

  get targets(): readonly LocalTarget[] {
    return this.#targets;
  }

  models(): readonly string[] {
    return this.#models;
  }

  targetsOf(model: string): readonly LocalTarget[] {
    return this.#byModel.get(model) ?? [];
  }

  /** Called after every release, so queues can dispatch. */
  /** Slots may have appeared (a backend became healthy, an on-demand load ended): tell the release listeners too. */
  changed(): void {
    for (const fn of this.#listeners) fn();
  }

  onRelease(fn: () => void): () => void {
    this.#listeners.add(fn);
    return () => this.#listeners.delete(fn);
  }

  /** performance.now() of the backend's last lease or release; undefined if it never served. */
  lastUsedOf(b: Backend): number | undefined {
    return this.#lastUsed.get(b);
  }

  busyOf(b: Backend): number {
    return this.#busy.get(b) ?? 0;
  }

  freeOf(b: Backend): number {
    return b.state === 'healthy' ? Math.max(0, b.parallel - this.busyOf(b)) : 0;
  }

  summarize(t: LocalTarget): TargetSummary {
    let slots = 0;
    let busy = 0;
    let loading = 0;
    for (const b of t.backends) {
      if (b.state === 'healthy') slots += b.parallel;
      else if (b.state === 'starting') loading++;
      busy += this.busyOf(b);
    }
    return { descriptor: t.descriptor, slots, busy, loading };
  }

  /**
   * release_ms of a target (SPEC section 7): with no free slot, the expected
   * time until one of its running requests ends; undefined when a slot is
   * free or nothing is known.
   */
  releaseMs(t: LocalTarget, now = performance.now()): number | undefined {
    const elapsed: number[] = [];
    let mean: number | undefined;
    let n = 0;
    for (const b of t.backends) {
      if (this.freeOf(b) > 0) return undefined;
      for (const r of this.#running.get(b) ?? []) elapsed.push(now - r.at);
      const m = this.#meanBusy.get(b);
      if (m !== undefined) {
        mean = ((mean ?? 0) * n + m) / (n + 1);
        n++;
      }
    }
    return releaseEstimate(elapsed, mean);
  }

  /** Does any target of this model do the workload (healthy or not)? */
  does(model: string, workload: Workload): boolean {
    return this.targetsOf(model).some((t) => descriptorDoes(t.descriptor, workload));
  }

  /** Free slots of this model for a workload, over the targets that do it. */
  freeFor(model: string, workload: Workload): number {
    let free = 0;
    for (const t of this.targetsOf(model)) if (descriptorDoes(t.descriptor, workload)) for (const b of t.backends) free += this.freeOf(b);
    return free;
  }

  /**
   * Free slots of this model for a workload, and how many of them are held back from batch requests: `heldOf` gives a
   * target's share from its healthy slots (queue/reserve.ts), never more than the target has free.
   */
  roomFor(model: string, workload: Workload, heldOf: (slots: number) => number): { free: number; held: number } {
    let free = 0;
    let held = 0;
    for (const t of this.targetsOf(model)) {
      if (!descriptorDoes(t.descriptor, workload)) continue;
      let tf = 0;
      for (const b of t.backends) tf += this.freeOf(b);
      free += tf;
      held += Math.min(tf, heldOf(this.summarize(t).slots));
    }
    return { free, held };
  }

  /** Does any healthy backend of this model, whatever its workloads, have a free slot? */
  hasFree(model: string): boolean {
    return this.targetsOf(model).some((t) => t.backends.some((b) => this.freeOf(b) > 0));
  }

  /**
   * Take a slot on a backend of `model` whose target does `workload`. With a
   * session key the rendezvous winner among backends with a free slot gets
   * it (so the key keeps one warm prompt cache); without one, the backend
   * with the most free slots.
   */
  tryLease(model: string, workload: Workload, sessionKey?: string): Lease | undefined {
    const free: { b: Backend; t: LocalTarget; n: number }[] = [];
    for (const t of this.targetsOf(model)) {
      if (!descriptorDoes(t.descriptor, workload)) continue;
      for (const b of t.backends) {
        const n = this.freeOf(b);
        if (n > 0) free.push({ b, t, n });
      }
    }
    if (free.length === 0) return undefined;
    let pick = free[0];
    if (sessionKey !== undefined && free.length > 1) {
      const winner = rendezvousRank(sessionKey, free.map((f) => f.b.id))[0];
      pick = free.find((f) => f.b.id === winner)!;
    } else {
      for (const f of free) if (f.n > pick.n) pick = f;
    }
    this.#busy.set(pick.b, this.busyOf(pick.b) + 1);
    this.#lastUsed.set(pick.b, performance.now());
    let released = false;
    const grantedAt = performance.now();
    const run = { at: grantedAt };
    let running = this.#running.get(pick.b);
    if (!running) this.#running.set(pick.b, (running = new Set()));
    running.add(run);
    return {
      backend: pick.b,
      target: pick.t,
      grantedAt,
      release: () => {
        if (released) return;
        released = true;
        running.delete(run);
        this.#meanBusy.set(pick.b, nextMeanBusy(this.#meanBusy.get(pick.b), performance.now() - grantedAt));
        this.#busy.set(pick.b, Math.max(0, this.busyOf(pick.b) - 1));
        this.#lastUsed.set(pick.b, performance.now());
        for (const fn of this.#listeners) fn();
      },
    };
  }

  /**
   * `lease`, counted as a slot held by member `member`'s forward until it is released: that member's polls are told
   * how many of a target's busy slots are its own (`your_busy`, SPEC section 7), so it can count its forwards in flight
   * against the report without guessing which of them the report saw (route/eligibility.ts).
   */
  heldBy(lease: Lease, member: string): Lease {
    const key = memberKey(member, lease.target);
    this.#ofMembers.set(key, (this.#ofMembers.get(key) ?? 0) + 1);
    // Before the slot's own release: a poll it answers (capacity/release-waits.ts) already counts the slot as not ours.
    return beforeRelease(lease, () => {
      const n = (this.#ofMembers.get(key) ?? 1) - 1;
      if (n > 0) this.#ofMembers.set(key, n);
      else this.#ofMembers.delete(key);
    });
  }

  /** Slots of `t` that member `member`'s forwards hold now. */
  busyOfMember(t: LocalTarget, member: string): number {
    return this.#ofMembers.get(memberKey(member, t)) ?? 0;
  }
}

/** A member's forwards' count on one target, kept by (model, descriptor): regrouping makes new target objects. */
const memberKey = (member: string, t: LocalTarget): string => `${member}\0${t.model}\0${descriptorKey(t.descriptor)}`;
