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

/** The URL a client on this machine reaches a bound address at: a wildcard bind is reached on loopback, IPv6 in brackets. */
export function localUrl(host: string, port: number): string {
  const h = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host;
  return `http://${h.includes(':') ? `[${h}]` : h}:${port}`;
}

/** A failed bind of `what` at `address` in words an operator can act on, naming the config `keys` that set it; any other error as it was. */
export function bindFailure(err: unknown, what: string, address: string, keys: string): unknown {
  const e = err as NodeJS.ErrnoException;
  return isBindError(e) ? new Error(`cannot bind ${what} to ${address} (${keys}): ${bindProblem(e)}`) : err;
}
