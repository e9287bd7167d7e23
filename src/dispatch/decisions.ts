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
  /** Prompt tokens the entry predicted the executor's engine holds (null: not priced). */
  predicted_cached?: number | null;
  /** The engine's own count of prompt tokens it served from its cache (null: it did not say). */
  cached_tokens?: number | null;
  /** A model load or unload on this node (SPEC section 11): route is `load` or `unload`, outcome what happened. */
  lifecycle?: { event: string; reason: string; detail: string };
}

export class DecisionFeed {
  readonly #ring: DecisionRecord[] = [];
  #seq = 0;

  constructor(private readonly size = 200) {}

  add(d: Omit<DecisionRecord, 'seq'>): void {
    const seq = ++this.#seq;
    this.#ring[seq % this.size] = { ...d, seq };
  }

  /** Records after `seq`, oldest first. */
  since(seq: number): DecisionRecord[] {
    return this.#ring.filter((d) => d && d.seq > seq).sort((a, b) => a.seq - b.seq);
  }

  get last(): number {
    return this.#seq;
  }
}
