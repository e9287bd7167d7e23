/**
 * The members-only tunnel to a lender's `ggml-rpc-server` (SPEC section 11,
 * "A model bigger than one host"). llama.cpp's RPC protocol has no
 * authentication and no encryption, so the RPC server listens on 127.0.0.1
 * only and a runner on another machine reaches it through the two viiwork
 * nodes:
 *
 *   llama-server --rpc 127.0.0.1:p → runner node's listener (openTunnel)
 *     → HTTP/1.1 Upgrade `GET /v1/split/tunnel/{lendId}` on the lender's
 *       API port, member-signed like a forward (tunnelUpgrade)
 *     → in a secured mesh, TLS 1.3 with a key derived from the mesh secret
 *     → the lender's 127.0.0.1:lendPort.
 *
 * Nothing new for an operator to open: the API port carries it. One upgrade
 * per connection llama-server opens.
 */
import http from 'node:http';
import net from 'node:net';
import type { Duplex } from 'node:stream';
import { judgeForward } from '../forward/verify.ts';
import { ApiError } from '../http/errors.ts';
import type { Log } from '../log.ts';
import type { MemberTable } from '../mesh/members.ts';
import { memberHeaders } from '../security/headers.ts';
import type { MeshMode } from '../security/secret.ts';
import { EMPTY_BODY_SHA256 } from '../security/signing.ts';
import { tunnelClientTls, tunnelServerTls } from './tunnel-tls.ts';

export const TUNNEL_PREFIX = '/v1/split/tunnel/';
/** The Upgrade token: only this protocol is spoken after the 101. */
export const TUNNEL_PROTOCOL = 'viiwork-rpc';
const LEND_ID = /^[A-Za-z0-9_-]{1,128}$/;

export interface TunnelUpgradeDeps {
  readonly mode: MeshMode;
  /** This node's name: a signature must name it as the receiver. */
  readonly self: string;
  /** Who is a member (and, in an open mesh, from which address). */
  readonly members: Pick<MemberTable, 'get'>;
  /** The loopback port of a lend this node runs for `member`, by its id; undefined: no such lend (or not that member's). */
  lendPort(lendId: string, member: string): number | undefined;
  readonly log: Log;
  /** Counted where the node counts refused member calls. */
  onReject?(reason: string): void;
}

/** A node's handler for 'upgrade' events: true when it took the request (answered or piped), false when not its path. */
export type UpgradeHandler = (req: http.IncomingMessage, socket: Duplex, head: Buffer) => boolean;

/** The lender's side: checks the member, answers 101, and pipes the connection (inside TLS when secured) to its lend. */
export function tunnelUpgrade(deps: TunnelUpgradeDeps): UpgradeHandler {
  return (req, socket, head) => {
    const path = (req.url ?? '').split('?')[0];
    if (!path.startsWith(TUNNEL_PREFIX)) return false;
    socket.on('error', () => socket.destroy());
    void accept(deps, req, socket, head, path.slice(TUNNEL_PREFIX.length)).catch((err) => {
      const e = err instanceof ApiError ? err : new ApiError(502, `the tunnel could not be opened: ${(err as Error).message}`, 'server_error', 'tunnel_failed');
      if (!(err instanceof ApiError)) deps.log.warn(`split tunnel: ${(err as Error).message}`);
      refuseUpgrade(socket, e.status, e.message, e.code ?? 'tunnel_refused');
    });
    return true;
  };
}

async function accept(deps: TunnelUpgradeDeps, req: http.IncomingMessage, socket: Duplex, head: Buffer, lendId: string): Promise<void> {
  if (req.method !== 'GET') throw new ApiError(405, `the tunnel takes GET with Upgrade: ${TUNNEL_PROTOCOL}`, 'invalid_request_error', 'method_not_allowed');
  if (String(req.headers.upgrade ?? '').toLowerCase() !== TUNNEL_PROTOCOL) throw new ApiError(400, `the tunnel speaks only Upgrade: ${TUNNEL_PROTOCOL}`, 'invalid_request_error', 'bad_upgrade');
  const sender = await judgeForward(req, Buffer.alloc(0), deps.mode, deps.members as MemberTable, (r) => deps.onReject?.(r), deps.self);
  if (sender.kind !== 'forward') throw new ApiError(403, 'the RPC tunnel is for members of this mesh only', 'permission_error', 'forbidden');
  const port = LEND_ID.test(lendId) ? deps.lendPort(lendId, sender.from) : undefined;
  if (port === undefined) throw new ApiError(404, `no lend "${lendId.slice(0, 64)}" for ${sender.from} on this node: ask for one with POST /v1/split/lend`, 'invalid_request_error', 'lend_not_found');
  // Reach the RPC server before saying yes, so a lend whose server is gone is an error the runner can read.
  const rpc = await connectLocal(port);
  if (socket.destroyed) return void rpc.destroy();
  socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: ${TUNNEL_PROTOCOL}\r\nConnection: Upgrade\r\n\r\n`);
  if (head.length > 0) socket.unshift(head);
  const inner = deps.mode.mode === 'secured' ? tunnelServerTls(socket, deps.mode.keys) : socket;
  splice(inner, rpc);
  deps.log.debug?.(`split tunnel: ${sender.from} → lend ${lendId} (127.0.0.1:${port})`);
}

function connectLocal(port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host: '127.0.0.1', port });
    s.once('connect', () => {
      s.removeAllListeners('error');
      resolve(s);
    });
    s.once('error', (e) => reject(new Error(`the lend's RPC server on 127.0.0.1:${port} did not answer (${(e as NodeJS.ErrnoException).code ?? e.message})`)));
  });
}

function refuseUpgrade(socket: Duplex, status: number, message: string, code: string): void {
  if (socket.destroyed) return;
  const body = JSON.stringify({ error: { message, type: status === 403 ? 'permission_error' : status === 401 ? 'authentication_error' : 'invalid_request_error', code } });
  socket.end(`HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? 'Error'}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
}

/** Both ways until either side ends; an error or end on one side ends the other (no half-open RPC stream). */
function splice(a: Duplex, b: Duplex): void {
  const end = () => {
    a.destroy();
    b.destroy();
  };
  a.on('error', end).on('close', end);
  b.on('error', end).on('close', end);
  a.pipe(b);
  b.pipe(a);
}

export interface TunnelOptions {
  readonly mode: MeshMode;
  readonly self: string;
  /** The lender's node name (a signature names its receiver). */
  readonly member: string;
  /** The lender's API base URL. */
  readonly url: string;
  readonly lendId: string;
  /** The address this node advertises: in an open mesh the lender knows a member by it (the node's forwards use it too). */
  readonly localAddress?: string;
  readonly log: Log;
}

export interface Tunnel {
  readonly host: '127.0.0.1';
  readonly port: number;
  close(): Promise<void>;
}

/**
 * The runner's side: a listener on 127.0.0.1 (an ephemeral port) for
 * `llama-server --rpc`; every connection it accepts is one upgrade to the
 * lender, piped through. A connection the lender refuses is closed (the
 * engine sees its RPC device fail, as it would a dead server).
 */
export async function openTunnel(opts: TunnelOptions): Promise<Tunnel> {
  const live = new Set<Duplex>();
  const track = (s: Duplex) => {
    live.add(s);
    s.once('close', () => live.delete(s));
  };
  const server = net.createServer((local) => {
    track(local);
    local.on('error', () => local.destroy());
    local.pause();
    dial(opts).then(
      (remote) => {
        track(remote);
        if (local.destroyed) return void remote.destroy();
        splice(local, remote);
        local.resume();
      },
      (err: Error) => {
        opts.log.warn(`split tunnel to ${opts.member} (lend ${opts.lendId}): ${err.message}`);
        local.destroy();
      },
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const port = (server.address() as net.AddressInfo).port;
  return {
    host: '127.0.0.1',
    port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const s of live) s.destroy();
      }),
  };
}

/** One upgrade to the lender: the piped stream (inside TLS when secured), or why not. */
export function dial(opts: Omit<TunnelOptions, 'log'>): Promise<Duplex> {
  const path = `${TUNNEL_PREFIX}${encodeURIComponent(opts.lendId)}`;
  const headers = {
    ...memberHeaders(opts.mode, opts.self, 'GET', path, EMPTY_BODY_SHA256, opts.member),
    connection: 'Upgrade',
    upgrade: TUNNEL_PROTOCOL,
  };
  return new Promise((resolve, reject) => {
    const req = http.request(new URL(path, opts.url), { method: 'GET', headers, agent: false, localAddress: opts.localAddress });
    req.setTimeout(10_000, () => req.destroy(new Error('the lender did not answer the upgrade within 10 s')));
    req.once('upgrade', (_res, socket, head) => {
      req.setTimeout(0);
      if (head.length > 0) socket.unshift(head);
      if (opts.mode.mode !== 'secured') return resolve(socket);
      const tls = tunnelClientTls(socket, opts.mode.keys[0]);
      tls.once('secureConnect', () => {
        tls.removeAllListeners('error');
        resolve(tls);
      });
      tls.once('error', (e) => {
        socket.destroy();
        reject(new Error(`the tunnel's TLS handshake failed (${e.message}): the two nodes do not share the mesh secret`));
      });
    });
    req.once('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (text.length < 2048 ? (text += d) : undefined));
      res.on('end', () => reject(new Error(`the lender refused the tunnel: ${res.statusCode} ${text.slice(0, 300)}`)));
    });
    req.once('error', reject);
    req.end();
  });
}
