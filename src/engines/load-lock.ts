/**
 * One model load at a time across the whole node (SPEC section 3: replicas
 * start "one at a time"). Loading two GGUFs at once fights over disk, RAM
 * and VRAM and makes both slower; a backend holds this lock from the spawn
 * of its engine until the engine is healthy or the attempt failed.
 *
 * A small FIFO async mutex: waiters are served in arrival order; a waiter
 * can give up through an AbortSignal (a backend stopped while it waits).
 */

export class LoadLock {
  #held = false;
  #holder: string | undefined;
  #waiters: Array<{ who: string; grant: () => void }> = [];

  /** Is someone loading now? */
  get held(): boolean {
    return this.#held;
  }
  /** Who holds it (the name given to acquire), for logs and dashboards. */
  get holder(): string | undefined {
    return this.#holder;
  }
  /** How many are waiting their turn. */
  get waiting(): number {
    return this.#waiters.length;
  }

  /**
   * Wait for the lock; resolves with its release function (calling it more
   * than once is harmless). Rejects with the signal's reason when `signal`
   * aborts first; the waiter then leaves the line.
   */
  acquire(who = 'anonymous', signal?: AbortSignal): Promise<() => void> {
    if (signal?.aborted) return Promise.reject(signal.reason ?? new Error('aborted'));
    return new Promise((resolve, reject) => {
      const grant = () => {
        signal?.removeEventListener('abort', onAbort);
        this.#held = true;
        this.#holder = who;
        let released = false;
        resolve(() => {
          if (released) return;
          released = true;
          this.#next();
        });
      };
      const entry = { who, grant };
      const onAbort = () => {
        const i = this.#waiters.indexOf(entry);
        if (i !== -1) this.#waiters.splice(i, 1);
        reject(signal?.reason ?? new Error('aborted'));
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      if (!this.#held) grant();
      else this.#waiters.push(entry);
    });
  }

  #next(): void {
    const w = this.#waiters.shift();
    if (w) w.grant();
    else {
      this.#held = false;
      this.#holder = undefined;
    }
  }
}

/** The node's one lock, shared by every engine that loads a model. */
export const engineLoadLock = new LoadLock();
