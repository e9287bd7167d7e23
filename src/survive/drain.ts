/**
 * Drain (SPEC section 13): a node that is asked to go (`viiwork drain`,
 * SIGTERM) first says so in its capacity report, so that every entry,
 * itself included, stops placing work on it; then it lets what it already
 * holds finish, within `node.drain_timeout`; only then does it leave the
 * mesh and stop. A rolling restart done this way loses no request.
 *
 * The order matters. Leaving first would cut forwards already on their way
 * here; stopping while members still hold a report without `draining` would
 * have them send work to a closed port. So the drain waits for every member
 * that was alive when it began to have polled a report that says
 * `draining` (or for that report of ours they hold to go stale, whichever
 * comes first), and for the requests here to end, before it leaves.
 */

/** Where a drain is. `idle`: not draining; `draining`: waiting for work to end; `leaving`: left or leaving the mesh. */
export type DrainPhase = 'idle' | 'draining' | 'leaving';

export interface DrainDeps {
  now(): number;
  /** node.drain_timeout: the longest the node waits for its requests before it goes anyway. */
  timeoutMs: number;
  /**
   * How long a member may go on routing here on a report from before the drain: one poll interval to ask again,
   * plus the age past which a report is no longer routed on (routing.stale_after).
   */
  noticeMs: number;
  /** The alive members now: the ones that must learn of the drain. */
  members(): readonly string[];
  /** Inference requests this node holds now: waiting, running here, or forwarded by it and not yet answered. */
  busy(): number;
  /**
   * Move the live conversations' caches to their next homes (files/hand-off.ts): called once the requests have ended,
   * before the node leaves, while members can still take the files. `since`: when the drain began (clock ms).
   */
  handOff?(since: number): Promise<void>;
  /** Leave the mesh and stop the node (saving what it keeps over a restart). */
  stop(): Promise<void>;
  log(line: string): void;
  /** How often the waits look again (default 50 ms: a counter read, nothing more). */
  pollMs?: number;
}

export class Drain {
  #phase: DrainPhase = 'idle';
  #startedAt = 0;
  #done: Promise<void> | undefined;
  /** Members that were alive when the drain began and have not yet been sent a report that says draining. */
  #unaware = new Set<string>();
  readonly #deps: DrainDeps;

  constructor(deps: DrainDeps) {
    this.#deps = deps;
  }

  get phase(): DrainPhase {
    return this.#phase;
  }

  /** True from the moment a drain is asked for: reported as `"draining": true`, and no entry places work here. */
  get draining(): boolean {
    return this.#phase !== 'idle';
  }

  /** When the drain began (clock ms); undefined when not draining. */
  get since(): number | undefined {
    return this.draining ? this.#startedAt : undefined;
  }

  /** When the drain will stop waiting for requests (clock ms); undefined when not draining. */
  get deadline(): number | undefined {
    return this.draining ? this.#startedAt + this.#deps.timeoutMs : undefined;
  }

  /** A member was sent this node's report: once draining, that member knows. */
  reported(member: string | undefined): void {
    if (member !== undefined && this.#phase === 'draining') this.#unaware.delete(member);
  }

  /**
   * Start draining (idempotent: a second ask joins the first). Resolves once the node has left the mesh and stopped.
   * `why` names who asked, for the log.
   */
  begin(why: string): Promise<void> {
    if (this.#done) return this.#done;
    this.#phase = 'draining';
    this.#startedAt = this.#deps.now();
    this.#unaware = new Set(this.#deps.members());
    this.#deps.log(`draining (${why}): taking no new work; up to ${Math.round(this.#deps.timeoutMs / 1000)}s for ${this.#deps.busy()} request(s) here to finish`);
    this.#done = this.#run();
    return this.#done;
  }

  async #run(): Promise<void> {
    const d = this.#deps;
    const deadline = this.#startedAt + d.timeoutMs;
    const noticeBy = Math.min(deadline, this.#startedAt + d.noticeMs);
    // A member that left or died meanwhile will not poll again, and sends nothing here either.
    await this.#until(() => {
      const alive = new Set(d.members());
      for (const m of this.#unaware) if (!alive.has(m)) this.#unaware.delete(m);
      return this.#unaware.size === 0;
    }, noticeBy);
    if (this.#unaware.size) d.log(`draining: ${[...this.#unaware].join(', ')} did not poll since the drain began; their reports of this node are stale by now`);
    const ended = await this.#until(() => d.busy() === 0, deadline);
    if (!ended) d.log(`draining: drain_timeout (${Math.round(d.timeoutMs / 1000)}s) passed with ${d.busy()} request(s) still here; they are cut`);
    else d.log(`draining: every request here has ended after ${d.now() - this.#startedAt} ms`);
    if (d.handOff) await d.handOff(this.#startedAt).catch((err) => d.log(`draining: moving caches failed: ${(err as Error).message}`));
    this.#phase = 'leaving';
    await d.stop();
  }

  /** Resolves true once `cond` holds, false when `by` (clock ms) passes first. */
  async #until(cond: () => boolean, by: number): Promise<boolean> {
    const every = this.#deps.pollMs ?? 50;
    for (;;) {
      if (cond()) return true;
      const left = by - this.#deps.now();
      if (left <= 0) return false;
      await new Promise((r) => setTimeout(r, Math.min(every, left)));
    }
  }
}

/** Counts the inference requests a node holds, from the moment they arrive until their answer is closed. */
export class WorkCount {
  #n = 0;

  get count(): number {
    return this.#n;
  }

  /** One request arrived; `closed` fires once when its answer has ended (sent or cut). */
  hold(closed: { once(event: 'close', fn: () => void): unknown }): void {
    this.#n++;
    closed.once('close', () => this.#n--);
  }
}
