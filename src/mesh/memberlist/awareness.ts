/**
 * Lifeguard's local health awareness (awareness.go): a score in
 * [0, max-1]; failed probes and refutations raise it, successful probes
 * lower it; probe intervals and timeouts are multiplied by (score + 1).
 */
export class Awareness {
  private score = 0;

  constructor(private readonly max: number) {}

  applyDelta(delta: number): void {
    this.score = Math.min(this.max - 1, Math.max(0, this.score + delta));
  }

  getHealthScore(): number {
    return this.score;
  }

  scaleTimeout(ms: number): number {
    return ms * (this.score + 1);
  }
}
