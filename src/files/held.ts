/**
 * Verified copies held open, so an engine reads the very file that was
 * verified (SPEC section 11: a mismatch is never loaded; issue 44 item 6).
 *
 * A name is checked once and opened later: a load waits for the node's load
 * lock (another engine may be loading for minutes), then spawns the engine,
 * which opens its `--model` path itself, and an engine that crashes is
 * started again on the same path much later. A file put under the copy's
 * name anywhere in between was what the engine read. So the node opens the
 * copy once, checks *that open file* against the record its verified fetch
 * left (inode, ctime, size, mtime), keeps it open, and hands engines
 * `/proc/<pid>/fd/<n>`: opening that reaches the inode the node holds, never
 * whatever the name points at now. Held files are closed when the node
 * stops, not before (an engine may be restarted on its path at any time).
 * Where /proc is missing (not Linux) the engine gets the name, checked just
 * before: the window is narrowed, not closed.
 */
import fs from 'node:fs';

/** What a verified copy's record pins (files/hash-index.ts IndexedFile). */
export interface Pin {
  size: number;
  mtimeMs: number;
  ino?: number;
  ctimeMs?: number;
}

/** Whether `st` is the file `pin` names: the same size and mtime, and (when pinned) the same inode and ctime. Pure. */
export function samePin(st: Pick<fs.Stats, 'size' | 'mtimeMs' | 'ino' | 'ctimeMs'>, pin: Pin): boolean {
  if (st.size !== pin.size || st.mtimeMs !== pin.mtimeMs) return false;
  return pin.ino === undefined || (st.ino === pin.ino && st.ctimeMs === pin.ctimeMs);
}

/** The path through which another process opens the file behind this process's descriptor `fd`; undefined without /proc. */
export function fdPath(fd: number, pid = process.pid): string | undefined {
  return PROC_FD ? `/proc/${pid}/fd/${fd}` : undefined;
}

const PROC_FD = process.platform === 'linux' && fs.existsSync('/proc/self/fd');

export class HeldCopies {
  /** By the copy's identity (inode and ctime): one descriptor each. */
  readonly #held = new Map<string, { fd: number; path: string }>();

  /**
   * The path an engine loads `file` by, when the file there is still the one
   * `pin` names: a held descriptor's /proc path (opened now, or earlier for
   * this same file). undefined: it is not that file (any more).
   */
  open(file: string, pin: Pin): string | undefined {
    const key = `${pin.ino}:${pin.ctimeMs}`;
    const held = this.#held.get(key);
    if (held && this.#still(held.fd, pin)) return fdPath(held.fd) ?? file;
    let fd: number;
    try {
      fd = fs.openSync(file, 'r');
    } catch {
      return undefined;
    }
    if (!this.#still(fd, pin)) {
      fs.closeSync(fd);
      return undefined;
    }
    return this.#keep(key, fd, file);
  }

  /** A descriptor of a copy just verified (the fetch's own, opened before its rename): kept, and its /proc path returned. */
  adopt(file: string, fd: number, pin: Pin): string {
    return this.#keep(`${pin.ino}:${pin.ctimeMs}`, fd, file);
  }

  #keep(key: string, fd: number, file: string): string {
    const old = this.#held.get(key);
    // The same identity again (a name moved back): the older descriptor is the same file; one is enough.
    if (old && old.fd !== fd) fs.closeSync(fd);
    else this.#held.set(key, { fd, path: file });
    const fdNow = this.#held.get(key)!.fd;
    return fdPath(fdNow) ?? file;
  }

  #still(fd: number, pin: Pin): boolean {
    try {
      return samePin(fs.fstatSync(fd), pin);
    } catch {
      return false;
    }
  }

  /** Held descriptors (tests, the log). */
  get size(): number {
    return this.#held.size;
  }

  /** Closes every held file: once the node's engines are stopped. */
  close(): void {
    for (const { fd } of this.#held.values()) {
      try {
        fs.closeSync(fd);
      } catch {
        // already closed
      }
    }
    this.#held.clear();
  }
}
