/**
 * SHA-256 of a file in a worker thread, so a 20 GB model is hashed without
 * holding the event loop (reading and hashing both happen off it). One
 * worker serves both uses: the hash index reads a whole file; a fetch has
 * the worker follow the temporary file it is writing ("hash up to byte N"),
 * so the receiving node's loop only moves bytes to the disk and the hash is
 * of what is really on the disk. The worker's code is plain JavaScript
 * passed with `eval`, so it runs the same under tsx and from a build, with
 * no loader in the worker.
 */
import { Worker } from 'node:worker_threads';

const WORKER_JS = `
const { parentPort, workerData } = require('node:worker_threads');
const fs = require('node:fs');
const crypto = require('node:crypto');
const h = crypto.createHash('sha256');
const buf = Buffer.allocUnsafe(4 * 1024 * 1024);
let fd;
let at = 0;
let failed = false;
function read(limit) {
  while (at < limit) {
    const n = fs.readSync(fd, buf, 0, Math.min(buf.length, limit - at), at);
    if (n === 0) {
      if (limit === Infinity) return;
      throw new Error('the file ends at ' + at + ' bytes, before ' + limit);
    }
    h.update(buf.subarray(0, n));
    at += n;
  }
}
parentPort.on('message', (m) => {
  if (failed) return;
  try {
    if (fd === undefined) fd = fs.openSync(workerData.path, 'r');
    if (m.op === 'upTo') read(m.bytes);
    else if (m.op === 'end') read(Infinity);
    else if (m.op === 'digest') {
      parentPort.postMessage({ sha256: h.digest('hex'), bytes: at });
      fs.closeSync(fd);
      parentPort.close();
    }
  } catch (err) {
    failed = true;
    parentPort.postMessage({ error: String((err && err.message) || err) });
    parentPort.close();
  }
});
`;

export interface FileDigest {
  sha256: string;
  /** Bytes hashed (the file's size as read). */
  bytes: number;
}

/**
 * A worker hashing one file from its start, as far as it is told. Calls are
 * queued in order; `digest()` answers once everything asked before it is
 * hashed. A read error (or the file ending early) rejects the digest.
 */
export class FileHasher {
  readonly #w: Worker;
  readonly #answer: Promise<FileDigest>;
  #done = false;

  constructor(
    readonly path: string,
    signal?: AbortSignal,
  ) {
    this.#w = new Worker(WORKER_JS, { eval: true, workerData: { path } });
    this.#answer = new Promise<FileDigest>((resolve, reject) => {
      const settle = (fn: () => void) => {
        if (this.#done) return;
        this.#done = true;
        signal?.removeEventListener('abort', onAbort);
        fn();
        void this.#w.terminate();
      };
      const onAbort = () => settle(() => reject(new Error('hashing cancelled')));
      if (signal?.aborted) return onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#w.once('message', (m: { sha256?: string; bytes?: number; error?: string }) =>
        settle(() => (m.error !== undefined ? reject(new Error(`cannot hash ${path}: ${m.error}`)) : resolve({ sha256: m.sha256!, bytes: m.bytes! }))),
      );
      this.#w.once('error', (err) => settle(() => reject(err)));
      this.#w.once('exit', () => settle(() => reject(new Error(`hashing ${path}: the worker exited without an answer`))));
    });
    // Whoever never asks for the digest (a fetch that broke off) must not see an unhandled rejection.
    this.#answer.catch(() => {});
  }

  /** Hash the file's bytes up to `bytes` (they must be on the disk by now). */
  upTo(bytes: number): void {
    if (!this.#done) this.#w.postMessage({ op: 'upTo', bytes });
  }

  /** Hash to the file's end. */
  toEnd(): void {
    if (!this.#done) this.#w.postMessage({ op: 'end' });
  }

  /** The SHA-256 of every byte hashed, once the worker has caught up; the worker then exits. */
  digest(): Promise<FileDigest> {
    if (!this.#done) this.#w.postMessage({ op: 'digest' });
    return this.#answer;
  }

  /** Stops the worker without an answer. */
  close(): void {
    if (this.#done) return;
    this.#done = true;
    void this.#w.terminate();
  }
}

/** Hashes `path` in a worker thread; rejects with the read error. `signal` terminates the worker. */
export function hashFileInWorker(path: string, signal?: AbortSignal): Promise<FileDigest> {
  const h = new FileHasher(path, signal);
  h.toEnd();
  return h.digest();
}
