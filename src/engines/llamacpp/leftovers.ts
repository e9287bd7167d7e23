/**
 * Engine processes must not outlive their node. A node stopped normally
 * stops them; one killed with SIGKILL or by the OOM killer cannot. Two
 * defences:
 *
 * - On Linux the engine is started through util-linux's `setpriv
 *   --pdeathsig SIGKILL`, so the kernel kills it the moment the node dies.
 * - Every engine this node starts is recorded in `state_dir/engines/`; at
 *   the next start, a recorded engine that still runs (its command line
 *   still names its port) is killed before a new one is started. This also
 *   covers systems without setpriv.
 */
import fs from 'node:fs';
import path from 'node:path';
import { findExecutable } from '../../config/executable.ts';

export interface EngineRecord {
  pid: number;
  port: number;
  binary: string;
}

let setprivPath: string | undefined | null = null;

/** The command prefix that ties an engine's life to this process, or [] where none is available. */
export function parentDeathPrefix(): string[] {
  if (process.platform !== 'linux') return [];
  if (setprivPath === null) {
    const found = findExecutable('setpriv', process.env.PATH || '/usr/bin:/bin', process.cwd());
    setprivPath = found.ok ? found.path : undefined;
  }
  return setprivPath ? [setprivPath, '--pdeathsig', 'SIGKILL', '--'] : [];
}

function recordFile(stateDir: string, id: string): string {
  return path.join(stateDir, 'engines', `${id.replace(/[^A-Za-z0-9._-]/g, '_')}.json`);
}

export function recordEngine(stateDir: string, id: string, rec: EngineRecord): void {
  const file = recordFile(stateDir, id);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, JSON.stringify(rec));
}

/** Drop the record of `id`'s engine, if it is still the one with `pid` (a restart may have recorded its successor). */
export function forgetEngine(stateDir: string, id: string, pid: number): void {
  const file = recordFile(stateDir, id);
  try {
    if ((JSON.parse(fs.readFileSync(file, 'utf8')) as EngineRecord).pid === pid) fs.rmSync(file, { force: true });
  } catch {
    // no record, or an unreadable one the next start replaces
  }
}

/**
 * Kill the engine a previous run of this node recorded for `id`, if it is
 * still running. Returns what it did, for the log; undefined when there was
 * nothing to do. A pid whose command line no longer names the recorded port
 * belongs to another process now and is left alone.
 */
export function reapLeftover(stateDir: string, id: string): string | undefined {
  const file = recordFile(stateDir, id);
  let rec: EngineRecord;
  try {
    rec = JSON.parse(fs.readFileSync(file, 'utf8')) as EngineRecord;
  } catch {
    return undefined;
  }
  fs.rmSync(file, { force: true });
  if (!Number.isInteger(rec.pid) || rec.pid <= 1) return undefined;
  let cmdline: string[];
  try {
    cmdline = fs.readFileSync(`/proc/${rec.pid}/cmdline`, 'utf8').split('\0');
  } catch {
    return undefined; // not running (or no /proc to make sure it is ours)
  }
  const at = cmdline.indexOf('--port');
  if (at < 0 || cmdline[at + 1] !== String(rec.port)) return undefined;
  try {
    process.kill(-rec.pid, 'SIGKILL');
  } catch {
    try {
      process.kill(rec.pid, 'SIGKILL');
    } catch {
      return undefined;
    }
  }
  return `killed ${path.basename(rec.binary)} pid ${rec.pid} (port ${rec.port}), left running by an earlier run of this node that ended without stopping it`;
}
