/**
 * Reading a request body under `api.max_body`, failing early on a declared
 * length that is too large, and giving up on an upload that stops arriving
 * for `idleMs` (api.body_idle_timeout): 408, and the connection is closed.
 */
import type http from 'node:http';
import { errors } from './errors.ts';

export function readBody(req: http.IncomingMessage, limit: number, idleMs = 0): Promise<Buffer> {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) {
    req.resume();
    return Promise.reject(errors.tooLarge(limit));
  }
  return new Promise((resolve, reject) => {
    const body = new Accumulator(Number.isFinite(declared) ? declared : 0);
    const timer = idleMs > 0 ? setTimeout(() => fail(errors.bodyIdle(idleMs), true), idleMs) : undefined;
    const onData = (chunk: Buffer) => {
      timer?.refresh();
      if (body.size + chunk.length > limit) return fail(errors.tooLarge(limit), false);
      body.add(chunk);
    };
    const onEnd = () => {
      cleanup();
      resolve(body.bytes());
    };
    const onError = (err: Error) => {
      cleanup();
      reject(err);
    };
    const onAborted = () => onError(Object.assign(new Error('the client aborted its upload'), { code: 'ECONNRESET' }));
    function cleanup() {
      clearTimeout(timer);
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('aborted', onAborted);
    }
    function fail(err: Error, close: boolean) {
      cleanup();
      // A stalled upload is answered with Connection: close (see errors.bodyIdle), so what is left of it is never read.
      if (!close) req.resume();
      reject(err);
    }
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onError);
    req.on('aborted', onAborted);
  });
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
