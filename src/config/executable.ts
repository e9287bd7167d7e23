/** Finding an executable the way spawn() will: used by `check` and by the engines that start one. */
import fs from 'node:fs';
import path from 'node:path';

/** Where `binary` would be found by spawn(): a path as is, a bare name on PATH. */
export function findExecutable(binary: string, pathVar: string, cwd: string): { ok: true; path: string } | { ok: false; message: string } {
  const runnable = (p: string) => {
    try {
      if (!fs.statSync(p).isFile()) return false;
      fs.accessSync(p, fs.constants.X_OK);
      return true;
    } catch {
      return false;
    }
  };
  if (binary.includes('/')) {
    const full = path.resolve(cwd, binary);
    if (!fs.existsSync(full)) return { ok: false, message: `${binary} does not exist` };
    return runnable(full) ? { ok: true, path: full } : { ok: false, message: `${binary} is not an executable file` };
  }
  for (const dir of pathVar.split(path.delimiter)) {
    if (!dir) continue;
    const candidate = path.resolve(cwd, dir, binary);
    if (runnable(candidate)) return { ok: true, path: candidate };
  }
  return { ok: false, message: `${binary} is not found on PATH` };
}
