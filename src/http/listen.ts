/** Binding a listening socket, and what a failed bind means in words an operator can act on. */
import type http from 'node:http';

/** The errors of a bind itself (the address is taken, missing or forbidden), not of what runs after it. */
export function isBindError(err: NodeJS.ErrnoException): boolean {
  return err.code === 'EADDRINUSE' || err.code === 'EADDRNOTAVAIL' || err.code === 'EACCES';
}

/** What a failed bind means, in words an operator can act on. */
export function bindProblem(err: NodeJS.ErrnoException): string {
  switch (err.code) {
    case 'EADDRINUSE':
      return 'the address is already in use (is another viiwork or another program running there?)';
    case 'EADDRNOTAVAIL':
      return 'this machine has no such address';
    case 'EACCES':
      return 'permission denied (ports below 1024 need privileges)';
    default:
      return err.message;
  }
}

/** `server.listen(port, host)`; rejects with the problem and the config keys that set the address (`keys`). */
export function listen(server: http.Server, host: string, port: number, keys: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) => reject(new Error(`cannot listen on ${host}:${port} (${keys}): ${bindProblem(err)}`)));
    server.listen(port, host, () => resolve());
  });
}
