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
    const chunks: Buffer[] = [];
    let size = 0;
    const timer = idleMs > 0 ? setTimeout(() => fail(errors.bodyIdle(idleMs), true), idleMs) : undefined;
    const onData = (chunk: Buffer) => {
      timer?.refresh();
      size += chunk.length;
      if (size > limit) return fail(errors.tooLarge(limit), false);
      chunks.push(chunk);
    };
    const onEnd = () => {
      cleanup();
      resolve(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size));
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
