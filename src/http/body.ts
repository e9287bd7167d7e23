/**
 * Reading a request body under `api.max_body`, failing early on a declared
 * length that is too large, and giving up on an upload that stops arriving
 * for `idleMs` (api.body_idle_timeout) or has not arrived whole `deadlineMs`
 * after its headers (api.body_timeout): 408, and the connection is closed.
 */
import type http from 'node:http';
import { errors } from './errors.ts';

export function readBody(req: http.IncomingMessage, limit: number, idleMs = 0, deadlineMs = 0): Promise<Buffer> {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) {
    drain(req, deadlineMs);
    return Promise.reject(errors.tooLarge(limit));
  }
  return new Promise((resolve, reject) => new BodyRead(req, limit, idleMs, deadlineMs, Number.isFinite(declared) ? declared : 0, resolve, reject));
}

/**
 * One body being read. Its listeners are made once per read as plain
 * member assignments: named closures would each cost a defineProperty under
 * the loader's keep-names transform, on every request.
 */
class BodyRead {
  readonly #body: Accumulator;
  readonly #timer: NodeJS.Timeout | undefined;
  /** One timer per body for the whole-body deadline: a trickle refreshes the idle timer forever, never this one. */
  readonly #deadline: NodeJS.Timeout | undefined;
  readonly onData: (chunk: Buffer) => void;
  readonly onEnd: () => void;
  readonly onError: (err: Error) => void;
  readonly onAborted: () => void;

  constructor(
    private readonly req: http.IncomingMessage,
    private readonly limit: number,
    idleMs: number,
    private readonly deadlineMs: number,
    expected: number,
    private readonly resolve: (body: Buffer) => void,
    private readonly reject: (err: Error) => void,
  ) {
    this.#body = new Accumulator(expected);
    this.#timer = idleMs > 0 ? setTimeout(() => this.fail(errors.bodyIdle(idleMs), true), idleMs) : undefined;
    this.#deadline = deadlineMs > 0 ? setTimeout(() => this.fail(errors.bodyDeadline(deadlineMs), true), deadlineMs) : undefined;
    this.onData = (chunk) => {
      this.#timer?.refresh();
      if (this.#body.size + chunk.length > this.limit) return this.fail(errors.tooLarge(this.limit), false);
      this.#body.add(chunk);
    };
    this.onEnd = () => {
      this.cleanup();
      this.resolve(this.#body.bytes());
    };
    this.onError = (err) => {
      this.cleanup();
      this.reject(err);
    };
    this.onAborted = () => this.onError(Object.assign(new Error('the client aborted its upload'), { code: 'ECONNRESET' }));
    req.on('data', this.onData);
    req.on('end', this.onEnd);
    req.on('error', this.onError);
    req.on('aborted', this.onAborted);
  }

  cleanup(): void {
    clearTimeout(this.#timer);
    clearTimeout(this.#deadline);
    this.req.off('data', this.onData);
    this.req.off('end', this.onEnd);
    this.req.off('error', this.onError);
    this.req.off('aborted', this.onAborted);
  }

  fail(err: Error, close: boolean): void {
    this.cleanup();
    // A stalled or late upload is answered with Connection: close (errors.bodyIdle, bodyDeadline), so what is left of it is never read.
    if (!close) drain(this.req, this.deadlineMs);
    this.reject(err);
  }
}

/**
 * Read and drop the rest of a refused body, so its answer (413) reaches the
 * client on a connection that stays usable; but a rest that trickles on past
 * `deadlineMs` is not waited for: the connection is closed. Only on refusals,
 * never per chunk.
 */
function drain(req: http.IncomingMessage, deadlineMs: number): void {
  req.resume();
  if (deadlineMs <= 0 || req.complete) return;
  const timer = setTimeout(() => req.socket.destroy(), deadlineMs);
  timer.unref();
  req.once('end', () => clearTimeout(timer));
  req.once('close', () => clearTimeout(timer));
}

/**
 * The body's bytes in one buffer, copied in as each chunk arrives: joining
 * all chunks at the end would copy a 30 MiB body (and fault in its fresh
 * pages) in one go on the event loop, a stall of 100 ms and more. With the
 * length declared the buffer is allocated once; without it, it doubles.
 */
class Accumulator {
  #buf: Buffer | undefined;
  #first: Buffer | undefined;
  size = 0;

  constructor(private readonly expected: number) {}

  add(chunk: Buffer): void {
    // The common small body arrives in one chunk: keep it without a copy.
    if (this.size === 0 && !this.#buf) {
      this.#first = chunk;
      this.size = chunk.length;
      return;
    }
    const need = this.size + chunk.length;
    if (!this.#buf || this.#buf.length < need) {
      const grown = Buffer.allocUnsafe(Math.max(need, this.expected, 2 * (this.#buf?.length ?? 0), 64 * 1024));
      if (this.#buf) this.#buf.copy(grown, 0, 0, this.size);
      else if (this.#first) this.#first.copy(grown, 0);
      this.#buf = grown;
      this.#first = undefined;
    }
    chunk.copy(this.#buf, this.size);
    this.size = need;
  }

  bytes(): Buffer {
    if (this.#buf) return this.#buf.subarray(0, this.size);
    return this.#first ?? Buffer.alloc(0);
  }
}
