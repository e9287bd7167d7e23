/** The last routing decisions of this node, for the dashboards' live feed (GET /v1/decisions?since=SEQ). */

export interface DecisionRecord {
  seq: number;
  /** Unix ms when the request ended. */
  at: number;
  entry: string;
  executor: string | null;
  model: string;
  workload: string;
  route: string;
  queued_ms: number;
  ttft_ms: number | null;
  outcome: string;
  alias?: string;
}

export class DecisionFeed {
  readonly #ring: DecisionRecord[] = [];
  #seq = 0;

  constructor(private readonly size = 200) {}

  add(d: Omit<DecisionRecord, 'seq'>): void {
    this.#ring.push({ ...d, seq: ++this.#seq });
    if (this.#ring.length > this.size) this.#ring.shift();
  }

  since(seq: number): DecisionRecord[] {
    return this.#ring.filter((d) => d.seq > seq);
  }

  get last(): number {
    return this.#seq;
  }
}
