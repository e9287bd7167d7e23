/**
 * Time for the state machine, injectable so tests drive it by hand.
 */
export interface TimerHandle {
  cancel(): void;
}

export interface Clock {
  /** Milliseconds, monotonic enough for timeouts. */
  now(): number;
  setTimeout(fn: () => void, ms: number): TimerHandle;
}

export const realClock: Clock = {
  now: () => performance.timeOrigin + performance.now(),
  setTimeout(fn, ms) {
    const t = setTimeout(fn, Math.max(0, ms));
    t.unref?.();
    return { cancel: () => clearTimeout(t) };
  },
};

/** Waits `ms` on a clock. */
export function sleep(clock: Clock, ms: number): Promise<void> {
  return new Promise((resolve) => clock.setTimeout(resolve, ms));
}

/**
 * A clock that only moves when told. `advance` fires due timers in order
 * and lets promises and setImmediate callbacks (mock network deliveries)
 * settle between them.
 */
export class ManualClock implements Clock {
  private t: number;
  private seq = 0;
  private timers: { at: number; seq: number; fn: () => void; dead: boolean }[] = [];

  constructor(start = 1_000_000) {
    this.t = start;
  }

  now(): number {
    return this.t;
  }

  setTimeout(fn: () => void, ms: number): TimerHandle {
    const timer = { at: this.t + Math.max(0, ms), seq: this.seq++, fn, dead: false };
    this.timers.push(timer);
    return { cancel: () => void (timer.dead = true) };
  }

  /** Lets pending I/O callbacks and promise chains run. */
  async settle(rounds = 5): Promise<void> {
    for (let i = 0; i < rounds; i++) await new Promise<void>((r) => setImmediate(r));
  }

  async advance(ms: number, stepMs = 10): Promise<void> {
    const end = this.t + ms;
    await this.settle();
    while (this.t < end) {
      const next = Math.min(end, this.t + stepMs);
      for (;;) {
        this.timers = this.timers.filter((x) => !x.dead);
        this.timers.sort((a, b) => a.at - b.at || a.seq - b.seq);
        const due = this.timers[0];
        if (!due || due.at > next) break;
        this.timers.shift();
        this.t = Math.max(this.t, due.at);
        due.fn();
        await this.settle();
      }
      this.t = next;
      await this.settle();
    }
  }
}
