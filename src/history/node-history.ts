/**
 * A node's history with its clock: every step it reads the gauges (this
 * node's slots and queues, every member's last report, the members alive,
 * forwards refused) and closes the request series; a query reads the
 * gauges once more, so the step in progress is current.
 */
import type { HostView } from '../route/types.ts';
import { sampleHosts } from './sample.ts';
import { History, type HistoryDoc, type HistoryQuery } from './store.ts';

export interface HistorySources {
  readonly self: string;
  now(): number;
  hosts(): readonly HostView[];
  queuedHere(model: string): number;
  /** Members alive, this node included. */
  membersAlive(): number;
  /** Forwards of this node refused by their member, since it started. */
  refusedTotal(): Promise<number>;
  log(message: string): void;
}

export class NodeHistory {
  readonly store: History;
  #timer: NodeJS.Timeout | undefined;
  #refused: number | undefined;

  constructor(
    private readonly src: HistorySources,
    opts: { stepMs?: number } = {},
  ) {
    this.store = new History(src.self, { stepMs: opts.stepMs, onFull: src.log });
  }

  get keepMs(): number {
    return this.store.keepMs;
  }

  start(): void {
    const step = this.store.stepMs;
    // Steps close on the wall clock's step boundaries, so every node's points line up.
    const first = step - (this.src.now() % step) + 50;
    this.#timer = setTimeout(() => {
      void this.tick();
      this.#timer = setInterval(() => void this.tick(), step);
      this.#timer.unref();
    }, first);
    this.#timer.unref();
  }

  stop(): void {
    clearTimeout(this.#timer);
    clearInterval(this.#timer);
  }

  /** One step's readings (the timer's; tests call it directly). */
  async tick(): Promise<void> {
    const now = this.src.now();
    this.#gauges(now);
    this.store.advance(now);
    const total = await this.src.refusedTotal().catch(() => undefined);
    if (total === undefined) return;
    // The step that just ended holds the refusals since the last reading.
    if (this.#refused !== undefined) this.store.gauge('refusals', this.src.self, null, Math.max(0, total - this.#refused) / (this.store.stepMs / 1000), now - this.store.stepMs / 2);
    this.#refused = total;
  }

  query(q: HistoryQuery, now: number): HistoryDoc {
    this.#gauges(now);
    return this.store.query(q, now);
  }

  #gauges(now: number): void {
    sampleHosts(this.store, this.src.hosts(), (m) => this.src.queuedHere(m), now);
    this.store.gauge('members_alive', this.src.self, null, this.src.membersAlive(), now);
  }
}
