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

/** llama.cpp's RPC server: a lend's process, and the runner's own part of a split model (SPEC section 11). */
export const RPC_SERVER_BINARY = 'ggml-rpc-server';

/**
 * The `ggml-rpc-server` to run: `node.rpc_server` when set; else the one beside
 * the node's llama-server (where the engine build puts both), else the name on PATH.
 */
export function rpcServerBinary(configured: string, llamaServer: string | undefined, pathVar = process.env.PATH ?? '', cwd = process.cwd()): string {
  if (configured) return configured;
  if (llamaServer) {
    const found = findExecutable(llamaServer, pathVar, cwd);
    if (found.ok) {
      const beside = path.join(path.dirname(found.path), RPC_SERVER_BINARY);
      if (findExecutable(beside, pathVar, cwd).ok) return beside;
    }
  }
  return RPC_SERVER_BINARY;
}
