/**
 * `node.transfer_rate`: the bytes per second this node sends model files at,
 * shared by all its transfers. Each chunk reserves its slot of send time;
 * the answer is how long to wait before sending it. Pure but for the
 * injected clock.
 */
export class RateGate {
  /** When the bytes reserved so far will have been sent at the rate (ms on the injected clock). */
  #free = -Infinity;

  constructor(
    /** Bytes per second; 0 = no limit. */
    readonly rate: number,
    readonly now: () => number = Date.now,
    /** Bytes that may go at once after an idle spell (so a small read is not delayed). */
    readonly burst = 256 * 1024,
  ) {}

  /** Ms to wait before sending `bytes` (0: send now). */
  reserve(bytes: number): number {
    if (this.rate <= 0) return 0;
    const now = this.now();
    const burstMs = (this.burst * 1000) / this.rate;
    const start = Math.max(this.#free, now - burstMs);
    this.#free = start + (bytes * 1000) / this.rate;
    return Math.max(0, this.#free - now);
  }
}
