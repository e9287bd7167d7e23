/** A bare node:http server hosting only the alias routes, for the HTTP and CLI tests. */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { createAliasRoutes, type AliasRoutesOptions } from '../../src/api/aliases.ts';
import type { AliasTable } from '../../src/aliases/table.ts';

export type AliasServer = { url: string; close(): Promise<void> };

/** Serve the alias routes (and 404 for anything else) on 127.0.0.1:<ephemeral>. */
export async function serveAliases(opts: Partial<AliasRoutesOptions> & { table: AliasTable }): Promise<AliasServer> {
  const routes = createAliasRoutes({ nodeName: 'n1', reached: () => ({ reached: 1, members: 1 }), ...opts });
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    routes(req, res, url).then(
      (handled) => {
        if (!handled) {
          res.writeHead(404, { 'content-type': 'text/plain' });
          res.end('not an alias path');
        }
      },
      (err) => {
        res.writeHead(500);
        res.end(String(err));
      },
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}
