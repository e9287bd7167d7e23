/**
 * The alias endpoints (SPEC section 9; writes per section 6):
 *
 *   GET    /v1/aliases                   live aliases, sorted
 *                                         {object:"list", version, data:[{alias,target,fallbacks,version,writer,at}]}
 *   GET    /v1/aliases/history[?alias=N] this node's record of changes, most recent last
 *                                         {object:"list", data:[{alias,action:"set"|"rm",target|null,fallbacks,version,writer,at}]}
 *   PUT    /v1/aliases/{name}            body {"target": "...", "fallbacks": ["...", ...]}
 *                                         -> {alias,target,fallbacks,version,reached,members}
 *   DELETE /v1/aliases/{name}            -> {alias,deleted:true,version,reached,members}
 *   POST   /v1/aliases/{name}/revert     -> {alias,target,fallbacks,version,reached,members,reverted:true}
 *
 * `{name}` is URL-encoded (a name may contain `/`). Writes are accepted only
 * from this machine: a loopback source or one of its own interface
 * addresses; any other source gets 403 before its body is read. The API's
 * general guards (CORS origin on writes) run before these routes.
 * `reached`/`members`: how many alive members have published an
 * `alias_version` at least the change's version, out of how many.
 */
import type http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import { readBody } from '../http/body.ts';
import { ApiError, errors, sendError, sendJson } from '../http/errors.ts';
import type { AliasTable } from '../aliases/table.ts';
import { AliasError, type AliasEntry, type AliasValue } from '../aliases/types.ts';
import type { RequestUrl } from './request-url.ts';

export type Reached = { reached: number; members: number };

export type AliasRoutesOptions = {
  table: AliasTable;
  /** This node's name: the writer of changes made through these endpoints. */
  nodeName: string;
  /** How many alive members (this node included) have published alias_version >= version, and how many alive members there are. */
  reached: (version: number) => Reached | Promise<Reached>;
  /** Called with each change written through these endpoints (after the table applied it). */
  onChange?: (entry: AliasEntry) => void;
  /** Whether a request from this remote address may write; default `isLocalAddress`. */
  isLocal?: (address: string | undefined) => boolean;
  /** Largest accepted request body; default 64 KiB. */
  maxBody?: number;
  /** How a body is read (the node's: its deadlines, per-client cap and Content-Encoding); default a bare bounded read. */
  readBody?: (req: http.IncomingMessage, limit: number) => Promise<Buffer>;
};

/**
 * Handles the request and returns true when `url` is an alias path; returns false (and touches nothing) otherwise.
 * `visible`: which aliases the caller may see in the lists (a scoped key sees only those /v1/models shows it); default all.
 */
export type AliasRoutes = (req: http.IncomingMessage, res: http.ServerResponse, url: RequestUrl, scope?: AliasScope) => Promise<boolean>;

/**
 * An alias's value as the caller may see it: the value (fallbacks it may not see left out), `null` for a removal it
 * may see, undefined when the alias is hidden from it.
 */
export type AliasScope = <A extends AliasValue>(alias: string, value: A | null) => A | null | undefined;

const PREFIX = '/v1/aliases';

/** An IP address in one canonical text form (IPv4 dotted, IPv6 compressed lower case, IPv4-mapped as IPv4), or undefined. */
function canonicalIp(address: string): string | undefined {
  let a = address.trim().toLowerCase();
  const zone = a.indexOf('%');
  if (zone >= 0) a = a.slice(0, zone);
  if (a.startsWith('[') && a.endsWith(']')) a = a.slice(1, -1);
  if (net.isIPv4(a)) return a;
  if (!net.isIPv6(a)) return undefined;
  const v6 = new URL(`http://[${a}]/`).hostname.slice(1, -1);
  const mapped = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(v6);
  if (mapped) {
    const hi = parseInt(mapped[1], 16);
    const lo = parseInt(mapped[2], 16);
    return `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
  }
  return v6;
}

/**
 * Whether a request from `address` comes from this machine: loopback
 * (127.0.0.0/8, ::1, IPv4-mapped 127.x) or an address of one of this
 * machine's interfaces. Unknown or malformed addresses are not local.
 */
export function isLocalAddress(address: string | undefined, interfaces: NodeJS.Dict<os.NetworkInterfaceInfo[]> = os.networkInterfaces()): boolean {
  if (!address) return false;
  const ip = canonicalIp(address);
  if (!ip) return false;
  if (ip === '::1' || (net.isIPv4(ip) && ip.startsWith('127.'))) return true;
  for (const list of Object.values(interfaces)) {
    for (const info of list ?? []) {
      if (canonicalIp(info.address) === ip) return true;
    }
  }
  return false;
}

/** An `AliasError` from the table as the client sees it. */
function toApiError(err: AliasError, name: string): ApiError {
  switch (err.code) {
    case 'not_found':
      return errors.unknownAlias(name);
    case 'nothing_to_revert':
      return errors.nothingToRevert(name);
    default:
      return errors.invalidAlias(err.message);
  }
}

function historyItem(e: AliasEntry) {
  return {
    alias: e.name,
    action: e.value ? 'set' : 'rm',
    target: e.value?.target ?? null,
    fallbacks: e.value?.fallbacks ?? [],
    version: e.version,
    writer: e.writer,
    at: e.at,
  };
}

async function readSetBody(req: http.IncomingMessage, limit: number, read: (req: http.IncomingMessage, limit: number) => Promise<Buffer>): Promise<{ target: unknown; fallbacks: unknown }> {
  const raw = await read(req, limit);
  let body: unknown;
  try {
    body = JSON.parse(raw.toString('utf8'));
  } catch (err) {
    throw errors.malformedJson((err as Error).message);
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw errors.notAnObject();
  const unknown = Object.keys(body).filter((k) => k !== 'target' && k !== 'fallbacks');
  if (unknown.length) throw errors.invalidAlias(`unknown key${unknown.length > 1 ? 's' : ''} ${unknown.map((k) => `"${k}"`).join(', ')}; send {"target": "...", "fallbacks": [...]}`);
  const { target, fallbacks } = body as Record<string, unknown>;
  if (typeof target !== 'string') throw errors.invalidAlias('"target" must be a model name (a string)');
  if (fallbacks !== undefined && (!Array.isArray(fallbacks) || fallbacks.some((f) => typeof f !== 'string'))) {
    throw errors.invalidAlias('"fallbacks" must be a list of model names');
  }
  return { target, fallbacks };
}

export function createAliasRoutes(opts: AliasRoutesOptions): AliasRoutes {
  const { table, nodeName } = opts;
  const isLocal = opts.isLocal ?? ((a: string | undefined) => isLocalAddress(a));
  const maxBody = opts.maxBody ?? 64 * 1024;

  const written = async (res: http.ServerResponse, entry: AliasEntry, extra: Record<string, unknown> = {}) => {
    opts.onChange?.(entry);
    const { reached, members } = await opts.reached(entry.version);
    const value = entry.value ? { target: entry.value.target, fallbacks: entry.value.fallbacks } : { deleted: true };
    sendJson(res, 200, { alias: entry.name, ...value, version: entry.version, reached, members, ...extra });
  };

  return async (req, res, url, scope) => {
    const path = url.pathname;
    if (path !== PREFIX && !path.startsWith(`${PREFIX}/`)) return false;
    const method = req.method ?? 'GET';
    const rest = path === PREFIX ? [] : path.slice(PREFIX.length + 1).split('/');
    let name = '';
    try {
      if (rest.length === 0 || (rest.length === 1 && rest[0] === '')) {
        if (method !== 'GET' && method !== 'HEAD') throw errors.methodNotAllowed(method, path, 'GET');
        const live = scope ? table.list().flatMap((a) => scope(a.name, a) ?? []) : table.list();
        sendJson(res, 200, { object: 'list', version: table.version, data: live.map(({ name: alias, ...v }) => ({ alias, ...v })) });
        return true;
      }
      if (rest.length === 1 && rest[0] === 'history' && (method === 'GET' || method === 'HEAD')) {
        const only = url.searchParams.get('alias') ?? undefined;
        const changes = scope ? table.history(only).flatMap((e) => { const value = scope(e.name, e.value); return value === undefined ? [] : [{ ...e, value }]; }) : table.history(only);
        sendJson(res, 200, { object: 'list', data: changes.map(historyItem) });
        return true;
      }
      const isRevert = rest.length === 2 && rest[1] === 'revert';
      if (rest.length > 2 || (rest.length === 2 && !isRevert) || rest[0] === '') throw errors.notFound(path);
      try {
        name = decodeURIComponent(rest[0]);
      } catch {
        throw errors.invalidAlias(`the alias name in ${path} is not valid URL encoding`);
      }
      const allow = isRevert ? 'POST' : 'PUT, DELETE';
      if (!allow.split(', ').includes(method)) throw errors.methodNotAllowed(method, path, allow);
      if (!isLocal(req.socket.remoteAddress)) {
        req.resume();
        throw errors.forbiddenRemoteWrite();
      }
      if (method !== 'PUT') req.resume();
      if (isRevert) {
        await written(res, table.revert(name, nodeName), { reverted: true });
      } else if (method === 'DELETE') {
        await written(res, table.remove(name, nodeName));
      } else {
        const body = await readSetBody(req, maxBody, opts.readBody ?? readBody);
        await written(res, table.set(name, body.target as string, (body.fallbacks as string[] | undefined) ?? [], nodeName));
      }
      return true;
    } catch (err) {
      if (err instanceof AliasError) sendError(res, toApiError(err, name));
      else if (err instanceof ApiError) sendError(res, err);
      else throw err;
      return true;
    }
  };
}
