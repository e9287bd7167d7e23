/**
 * Lifeguard suspicion timer (suspicion.go). Starts at `max` when k > 0
 * independent confirmations are expected (else `min`), and shrinks
 * logarithmically towards `min` as confirmations from distinct members
 * arrive: timeout = max - log(n+1)/log(k+1) * (max - min).
 */
import { Clock, TimerHandle } from './clock.ts';

/** The base suspicion timeout: mult * max(1, log10(n)) * probe interval. */
export function suspicionTimeout(suspicionMult: number, n: number, intervalMs: number): number {
  const nodeScale = Math.max(1, Math.log10(Math.max(1, n)));
  return Math.floor((suspicionMult * Math.floor(nodeScale * 1000) * intervalMs) / 1000);
}

export function remainingSuspicionTime(n: number, k: number, elapsedMs: number, minMs: number, maxMs: number): number {
  const frac = Math.log(n + 1) / Math.log(k + 1);
  const raw = maxMs / 1000 - frac * (maxMs / 1000 - minMs / 1000);
  let timeout = Math.floor(1000 * raw);
  if (timeout < minMs) timeout = minMs;
  return timeout - elapsedMs;
}

export class Suspicion {
  private n = 0;
  private readonly confirmations = new Set<string>();
  private readonly start: number;
  private timer: TimerHandle;
  private fired = false;

  constructor(
    from: string,
    private readonly k: number,
    private readonly minMs: number,
    private readonly maxMs: number,
    private readonly clock: Clock,
    private readonly onTimeout: (confirmations: number) => void,
  ) {
    this.confirmations.add(from);
    this.start = clock.now();
    this.timer = clock.setTimeout(() => this.fire(), k < 1 ? minMs : maxMs);
  }

  private fire(): void {
    if (this.fired) return;
    this.fired = true;
    this.onTimeout(this.n);
  }

  /** Records a confirmation; true if it was new and counted. */
  confirm(from: string): boolean {
    if (this.n >= this.k) return false;
    if (this.confirmations.has(from)) return false;
    this.confirmations.add(from);
    this.n++;
    if (this.fired) return true;
    const remaining = remainingSuspicionTime(this.n, this.k, this.clock.now() - this.start, this.minMs, this.maxMs);
    this.timer.cancel();
    if (remaining > 0) this.timer = this.clock.setTimeout(() => this.fire(), remaining);
    else this.fire();
    return true;
  }

  cancel(): void {
    this.fired = true;
    this.timer.cancel();
  }
}
