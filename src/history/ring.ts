/**
 * One series over time: a fixed ring of `size` steps of `stepMs`, so a
 * series costs the same memory the day it starts and six hours later. Each
 * cell remembers which step it holds; a cell left from an older lap of the
 * ring reads as no value, never as a stale one.
 */
export class Ring {
  readonly #values: Float64Array;
  /** The step (floor(ms / stepMs)) each cell holds; -1: never written. */
  readonly #steps: Float64Array;

  constructor(
    readonly stepMs: number,
    readonly size: number,
  ) {
    this.#values = new Float64Array(size);
    this.#steps = new Float64Array(size).fill(-1);
  }

  /** Write the value of step `step` (a later write of the same step replaces it). */
  set(step: number, value: number): void {
    const i = step % this.size;
    this.#steps[i] = step;
    this.#values[i] = value;
  }

  /** The value of `step`, or undefined when none was written (or it has been overwritten). */
  get(step: number): number | undefined {
    const i = step % this.size;
    return this.#steps[i] === step ? this.#values[i] : undefined;
  }

  /** [ms at the step's start, value] of every written step from `fromStep` to `toStep`, oldest first. */
  points(fromStep: number, toStep: number): [number, number][] {
    const out: [number, number][] = [];
    const from = Math.max(fromStep, toStep - this.size + 1);
    for (let s = from; s <= toStep; s++) {
      const v = this.get(s);
      if (v !== undefined) out.push([s * this.stepMs, v]);
    }
    return out;
  }
}
