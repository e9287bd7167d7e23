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
  /** Run on this node: the engine slot its choice took (SPEC 9.6, "Slot choice"). */
  slot?: number;
  /** What that placement evicted: the destroyed prompt's tokens and how long its conversation had been idle. */
  evicted_tokens?: number;
  evicted_idle_ms?: number;
  /**
   * Run on this node, on an engine with a host-RAM prompt cache: of the cached tokens its model predicted, those
   * restored from RAM rather than held by the slot (absent: a slot hit, or no pool). The engine's own count does not
   * tell the two apart; this does.
   */
  restored_tokens?: number;
  /**
   * A stream cut after its first byte and continued on another host (SPEC 13): the host it was cut from, and the tokens
   * of the answer it had streamed (carried to the continuation as the assistant's start). The executor is the host that
   * finished it.
   */
  continued_from?: string;
  continued_tokens?: number;
  /**
   * Run here with a member's slot cache moved in for it (SPEC 13, "Moving a cache"): the member, what became of the
   * move (moved, priced_out, refused, gone, failed), the tokens restored (or held there), the file's bytes and the
   * move's ms from asking the holder to the end of the restore.
   */
  moved_from?: string;
  move_outcome?: string;
  moved_tokens?: number;
  moved_bytes?: number;
  moved_ms?: number;
  /** The id of the request's timeline (GET /v1/timeline/{id}): the entry's name and its number for the request. */
  timeline?: string;
  /** A model load or unload on this node (SPEC section 11): route is `load` or `unload`, outcome what happened. */
  lifecycle?: { event: string; reason: string; detail: string };
}

export class DecisionFeed {
  readonly #ring: DecisionRecord[] = [];
  #seq = 0;

  constructor(private readonly size = 200) {}

  /** `d` becomes the record (numbered in place, not copied: one a request, made for this call). */
  add(d: Omit<DecisionRecord, 'seq'>): void {
    const seq = ++this.#seq;
    const r = d as DecisionRecord;
    r.seq = seq;
    this.#ring[seq % this.size] = r;
  }

  /** The record added last. */
  get newest(): DecisionRecord | undefined {
    return this.#ring[this.#seq % this.size];
  }

  /** Records after `seq`, oldest first. */
  since(seq: number): DecisionRecord[] {
    return this.#ring.filter((d) => d && d.seq > seq).sort((a, b) => a.seq - b.seq);
  }

  get last(): number {
    return this.#seq;
  }
}
