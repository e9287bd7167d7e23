/**
 * Waiting for a condition in tests: poll a predicate until it holds or a
 * deadline passes. Use this instead of bare sleeps to synchronise with
 * anything asynchronous (a process that loads, a state change, a counter):
 * on a loaded 2-core machine a sleep that is "long enough" never is.
 */

export interface WaitOptions {
  /** Give up after this long (default 5000 ms). */
  timeoutMs?: number;
  /** Poll this often (default 10 ms). */
  intervalMs?: number;
  /** Named in the timeout error, e.g. 'backend healthy'. */
  what?: string;
}

/**
 * Resolves with the predicate's first truthy value; rejects with an Error
 * naming `what` when the deadline passes. The predicate may be async; an
 * exception it throws is treated as "not yet" and reported on timeout.
 */
export async function waitFor<T>(pred: () => T | Promise<T>, opts: WaitOptions = {}): Promise<NonNullable<T>> {
  const timeoutMs = opts.timeoutMs ?? 5000;
  const intervalMs = opts.intervalMs ?? 10;
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const v = await pred();
      if (v) return v as NonNullable<T>;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() >= deadline) {
      const what = opts.what ? ` for ${opts.what}` : '';
      const why = lastError ? ` (last error: ${lastError instanceof Error ? lastError.message : String(lastError)})` : '';
      throw new Error(`timed out after ${timeoutMs} ms waiting${what}${why}`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/** A promise that resolves on the next `event` of `emitter` (with its first argument), or rejects at the deadline. */
export function nextEvent<T = unknown>(
  emitter: { once(event: string, fn: (...args: any[]) => void): unknown; off(event: string, fn: (...args: any[]) => void): unknown },
  event: string,
  timeoutMs = 5000,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const fn = (v: T) => {
      clearTimeout(timer);
      resolve(v);
    };
    const timer = setTimeout(() => {
      emitter.off(event, fn);
      reject(new Error(`timed out after ${timeoutMs} ms waiting for event '${event}'`));
    }, timeoutMs);
    emitter.once(event, fn);
  });
}
