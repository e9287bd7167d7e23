/**
 * A request's "the client went away" (or "the member went quiet"), told to
 * whatever waits on it. Every request needs one, and an AbortController
 * (an EventTarget, a signal made on first read) was the largest allocation
 * of the request path a profile under wrk showed. `GoneFlag` is the same
 * promise without the machinery: a flag and the listeners of the few
 * parties that wait (the relay, a queue wait, a slot wait).
 *
 * `Gone` is the part of AbortSignal those parties read, so an AbortSignal
 * serves wherever a `Gone` is asked for (tests, the embedded engine). The
 * one consumer that needs a real AbortSignal (undici's request(), in a
 * tokenizer call) converts with `abortSignalOf`.
 */

/** A listener: a function, or an object with `handleEvent` (no closure per call). */
export type GoneListener = ((event: GoneEvent) => void) | { handleEvent(event: GoneEvent): void };

/** What a listener is told: `target` is the flag that fired. */
export interface GoneEvent {
  readonly type: string;
  readonly target: unknown;
}

/** The part of AbortSignal request-scoped work reads. */
export interface Gone {
  readonly aborted: boolean;
  addEventListener(type: 'abort', listener: GoneListener, options?: { once?: boolean }): void;
  removeEventListener(type: 'abort', listener: GoneListener): void;
}

export class GoneFlag implements Gone {
  #aborted = false;
  /** Most requests have one or two listeners at a time: a small array, not a Set. */
  #listeners: GoneListener[] | undefined;
  #real: AbortController | undefined;

  get aborted(): boolean {
    return this.#aborted;
  }

  addEventListener(_type: 'abort', listener: GoneListener, _options?: { once?: boolean }): void {
    // Every listener here is once-only: the flag fires once.
    if (this.#aborted) return;
    (this.#listeners ??= []).push(listener);
  }

  removeEventListener(_type: 'abort', listener: GoneListener): void {
    const ls = this.#listeners;
    if (!ls) return;
    const i = ls.indexOf(listener);
    if (i >= 0) ls.splice(i, 1);
  }

  /**
   * Fire once: every listener is called (and forgotten), in the order they were added; as with AbortSignal, one
   * removed by an earlier listener meanwhile is not called.
   */
  fire(): void {
    if (this.#aborted) return;
    this.#aborted = true;
    this.#real?.abort();
    const ls = this.#listeners;
    if (!ls) return;
    const event: GoneEvent = { type: 'abort', target: this };
    for (const l of [...ls]) {
      if (!ls.includes(l)) continue;
      if (typeof l === 'function') l(event);
      else l.handleEvent(event);
    }
    this.#listeners = undefined;
  }

  /** A real AbortSignal that aborts with this flag (made once, on first use). */
  toAbortSignal(): AbortSignal {
    if (!this.#real) {
      this.#real = new AbortController();
      if (this.#aborted) this.#real.abort();
    }
    return this.#real.signal;
  }
}

/** An AbortSignal for a `Gone`: itself when it is one, else one that aborts with it. */
export function abortSignalOf(gone: Gone): AbortSignal {
  if (gone instanceof AbortSignal) return gone;
  if (gone instanceof GoneFlag) return gone.toAbortSignal();
  const ac = new AbortController();
  if (gone.aborted) ac.abort();
  else gone.addEventListener('abort', () => ac.abort(), { once: true });
  return ac.signal;
}
