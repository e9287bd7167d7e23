/**
 * SHA-256 of a file in a worker thread, so a 20 GB model is hashed without
 * holding the event loop (reading and hashing both happen off it). The
 * worker's code is plain JavaScript passed with `eval`, so it runs the same
 * under tsx and from a build, with no loader in the worker.
 */
import { Worker } from 'node:worker_threads';

const WORKER_JS = `
const { parentPort, workerData } = require('node:worker_threads');
const fs = require('node:fs');
const crypto = require('node:crypto');
const h = crypto.createHash('sha256');
const buf = Buffer.allocUnsafe(4 * 1024 * 1024);
let fd;
try {
  fd = fs.openSync(workerData.path, 'r');
  let bytes = 0;
  for (;;) {
    const n = fs.readSync(fd, buf, 0, buf.length, null);
    if (n === 0) break;
    h.update(buf.subarray(0, n));
    bytes += n;
  }
  parentPort.postMessage({ sha256: h.digest('hex'), bytes });
} catch (err) {
  parentPort.postMessage({ error: String(err && err.message || err) });
} finally {
  if (fd !== undefined) fs.closeSync(fd);
}
`;

export interface FileDigest {
  sha256: string;
  /** Bytes hashed (the file's size as read). */
  bytes: number;
}

/** Hashes `path` in a worker thread; rejects with the read error. `signal` terminates the worker. */
export function hashFileInWorker(path: string, signal?: AbortSignal): Promise<FileDigest> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(new Error('hashing cancelled'));
    const w = new Worker(WORKER_JS, { eval: true, workerData: { path } });
    let done = false;
    const onAbort = () => {
      if (done) return;
      done = true;
      void w.terminate();
      reject(new Error('hashing cancelled'));
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    w.once('message', (m: { sha256?: string; bytes?: number; error?: string }) => {
      if (done) return;
      done = true;
      signal?.removeEventListener('abort', onAbort);
      if (m.error !== undefined) reject(new Error(`cannot hash ${path}: ${m.error}`));
      else resolve({ sha256: m.sha256!, bytes: m.bytes! });
    });
    w.once('error', (err) => {
      if (done) return;
      done = true;
      signal?.removeEventListener('abort', onAbort);
      reject(err);
    });
    w.once('exit', () => {
      if (done) return;
      done = true;
      reject(new Error(`hashing ${path}: the worker exited without an answer`));
    });
  });
}
