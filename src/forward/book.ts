/**
 * This node's own forwards in flight and the refusal marks it holds
 * (SPEC section 9, step 4): what the router subtracts from members' reports.
 */
import type { InFlightForward, RefusalMark } from '../route/types.ts';

export class ForwardBook {
  readonly #inFlight = new Set<InFlightForward>();
  #marks: RefusalMark[] = [];

  constructor(private readonly now: () => number = Date.now) {}

  start(host: string, model: string, target: string): () => void {
    const f: InFlightForward = { host, model, target, startedAt: this.now() };
    this.#inFlight.add(f);
    return () => this.#inFlight.delete(f);
  }

  refuse(host: string, model: string, workload: string): void {
    this.#marks = this.#marks.filter((m) => !(m.host === host && m.model === model && m.workload === workload));
    this.#marks.push({ host, model, workload, at: this.now() });
  }

  /** Drop marks that a newer report has answered (the router ignores them anyway; this keeps the list short). */
  prune(polledAt: (host: string) => number | undefined): void {
    this.#marks = this.#marks.filter((m) => {
      const p = polledAt(m.host);
      return p === undefined || p <= m.at;
    });
  }

  get inFlight(): InFlightForward[] {
    return [...this.#inFlight];
  }

  get marks(): readonly RefusalMark[] {
    return this.#marks;
  }
}
