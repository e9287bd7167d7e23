/**
 * The HTTP API on port 8086: the route table, the browser-write guard and
 * the operations endpoints. Inference lives in inference.ts.
 */
import http from 'node:http';
import net from 'node:net';
import type { Duplex } from 'node:stream';
import type { ApiNode } from './ports.ts';
import { dialectOfPath, endpointFor, errorShapeOf } from '../workloads/workloads.ts';
import { parseHeld } from '../capacity/digest.ts';
import { classifyForwardHeaders } from '../security/headers.ts';
import { allowsModel, needOf, reaches, scopedAlias, type Caller } from '../keys/access.ts';
import type { AliasValue } from '../aliases/types.ts';
import { handleLimits, LIMITS_PATH } from './limits.ts';
import { handleKeys, handleKeyTable, KEY_TABLE_PATH } from './keys.ts';
import { handleUsage } from './usage.ts';
import { fleetCapacity, meshDocument, modelsDocument } from './fleet.ts';
import { ApiError, errors, sendError, sendJson, type ErrorShape } from '../http/errors.ts';
import { handleInference } from './inference.ts';
import { clientAddress, readRequestBody } from './body.ts';
import { createAliasRoutes, type AliasRoutes } from './aliases.ts';
import { handleLifecycle, lifecyclePath } from './lifecycle.ts';
import { DRAIN_PATH, handleDrain } from './drain.ts';
import { isUiPath, serveUi } from '../ui/serve.ts'; // dashboards
import { FILES_PREFIX } from '../files/serve.ts';
import { handleCacheMove, MOVE_SAVE_PATH, MOVE_TAKE_PATH } from './cache-moves.ts';
import { handleSplit, isSplitPath } from './split.ts';
import { listen } from '../http/listen.ts';
import { parseHistoryQuery } from '../history/query.ts';
import { handleTimeline, TIMELINE_PREFIX } from './timeline.ts';
import { requestUrl, type RequestUrl } from './request-url.ts';

type Handler = (node: ApiNode, req: http.IncomingMessage, res: http.ServerResponse, url: RequestUrl, caller: Caller | undefined) => Promise<void> | void;

const GET_ROUTES: Record<string, Handler> = {
  '/health': health,
  '/v1/models': (node, _req, res, _url, caller) => sendJson(res, 200, scopedModels(node, caller)),
  '/v1/fleet/capacity': (node, _req, res) => sendJson(res, 200, fleetCapacity(node)),
  '/v1/mesh': (node, _req, res) => sendJson(res, 200, meshDocument(node)),
  '/v1/decisions': (node, _req, res, url) => sendJson(res, 200, { last: node.decisions.last, data: node.decisions.since(Number(url.searchParams.get('since')) || 0) }),
  '/v1/history': (node, _req, res, url) => {
    const now = node.now();
    sendJson(res, 200, node.history.query(parseHistoryQuery(url.searchParams, now, node.history.keepMs), now));
  },
  '/v1/capacity': capacity,
  '/metrics': metrics,
};

const WRITE_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

export function createApiHandler(node: ApiNode): http.RequestListener {
  const aliasRoutes = createAliasRoutes({ table: node.aliases, nodeName: node.name, reached: (v) => node.aliasReach(v), readBody: (req, limit) => readRequestBody(node, req, limit) });
  return (req, res) => {
    handle(node, req, res, aliasRoutes).catch((err) => {
      // Clients of Anthropic's SDKs read Anthropic's error shape (SPEC section 4): the path's dialect says which.
      const shape = errorShapeOfRequest(req);
      if (err instanceof ApiError) return sendError(res, err, {}, shape);
      // A client that went away mid-upload is not a fault of ours. (Not `req.destroyed`: a request read to its end is
      // destroyed too, and an error after that is ours to answer and log: issue 46 found it reset instead.)
      if ((err as NodeJS.ErrnoException).code === 'ECONNRESET' || req.socket.destroyed) return void res.destroy();
      node.log.error(`unexpected error on ${req.method} ${req.url}: ${(err as Error).stack ?? err}`);
      sendError(res, new ApiError(500, 'internal error in viiwork; see the node log', 'server_error', 'internal_error'), {}, shape);
    });
  };
}

/** The error shape for a request's path (its dialect's); OpenAI's for a path that does not even parse. */
function errorShapeOfRequest(req: http.IncomingMessage): ErrorShape {
  try {
    return errorShapeOf(dialectOfPath(new URL(req.url ?? '/', 'http://node').pathname));
  } catch {
    return 'openai';
  }
}

/** The node's API server, listening on api.host:api.port (rejects naming those keys when it cannot bind). */
export async function serveApi(node: ApiNode): Promise<http.Server> {
  const api = node.config.api;
  const handler = createApiHandler(node);
  const server = http.createServer({ connectionsCheckingInterval: checkingInterval(api.header_timeout, api.body_timeout) }, handler);
  answerRawErrors(server);
  // Only a node that lends memory listens for upgrades (the RPC tunnel, SPEC 11): with a listener, Node hands every
  // request carrying Upgrade (curl's h2c offer too) to it, so elsewhere such requests stay ordinary ones.
  const upgrade = node.upgrade;
  if (upgrade) server.on('upgrade', (req: http.IncomingMessage, socket: Duplex, head: Buffer) => upgrade(req, socket, head) || answerIgnoringUpgrade(req, socket, handler));
  server.keepAliveTimeout = 65_000;
  // A client has api.header_timeout to send its headers; a body that stops arriving or arrives too slowly is dropped by
  // readRequestBody (api.body_idle_timeout, api.body_timeout). Node's own request timeout, counted from the request's
  // first byte, is the backstop for every path, also those that answer without reading the body (404, 405, 401, a
  // GET route): a body that trickles on after its answer is not read for ever.
  server.headersTimeout = api.header_timeout;
  server.requestTimeout = api.header_timeout + api.body_timeout;
  await listen(server, api.host, api.port, 'api.host, api.port');
  return server;
}

/**
 * How often Node looks for requests past their header or request timeout: a
 * quarter of the shorter one, between 250 ms and Node's default 30 s.
 */
export function checkingInterval(headerMs: number, bodyMs: number): number {
  return Math.min(30_000, Math.max(250, Math.floor(Math.min(headerMs, bodyMs) / 4)));
}

/** Stop accepting and close idle connections now; busy ones get 2 s to finish. Resolves when the server has closed. */
export function closeApi(server: http.Server): Promise<void> {
  server.closeIdleConnections();
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  setTimeout(() => server.closeAllConnections(), 2000).unref();
  return closed;
}

/**
 * Answers Node's own HTTP parser gives before any handler runs (a broken
 * request line, headers too large, a header timeout) and CONNECT, in the
 * OpenAI error shape, then closes the connection.
 */
export function answerRawErrors(server: http.Server): void {
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
    if (!socket.writable || (err.code === 'ECONNRESET' && !socket.readable)) return void socket.destroy();
    // A request past its whole-request timeout whose answer is under way (or was sent while its body still trickled):
    // nothing more can be said on this connection.
    if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT' && (socket as Duplex & { _httpMessage?: unknown })._httpMessage) return void socket.destroy();
    const [status, reason, message]: [number, string, string] =
      err.code === 'HPE_HEADER_OVERFLOW'
        ? [431, 'Request Header Fields Too Large', 'the request headers are too large; send fewer or shorter headers']
        : err.code === 'ERR_HTTP_HEADERS_TIMEOUT'
          ? [408, 'Request Timeout', 'the request headers did not arrive in time (api.header_timeout)']
          : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
            ? [408, 'Request Timeout', 'the request did not arrive whole in time (api.header_timeout + api.body_timeout from its first byte)']
            : [400, 'Bad Request', `the request is not valid HTTP/1.1 (${String(err.code ?? 'parse error').slice(0, 40)})`];
    rawAnswer(socket, status, reason, message);
  });
  server.on('connect', (_req: http.IncomingMessage, socket: Duplex) => rawAnswer(socket, 405, 'Method Not Allowed', 'CONNECT is not allowed: this is an OpenAI-compatible API, not a proxy'));
}

/**
 * An Upgrade this node does not speak (an h2c offer): answered as the plain HTTP/1.1 request it also is, then the
 * connection closes. One with a body is refused: after an upgrade Node no longer parses it.
 */
function answerIgnoringUpgrade(req: http.IncomingMessage, socket: Duplex, handler: http.RequestListener): void {
  const length = Number(req.headers['content-length'] ?? 0);
  if (req.headers['transfer-encoding'] !== undefined || length > 0) {
    return rawAnswer(socket, 400, 'Bad Request', 'a request with a body may not offer Upgrade on this node; send it without the Upgrade header');
  }
  const res = new http.ServerResponse(req);
  res.shouldKeepAlive = false;
  res.assignSocket(socket as net.Socket);
  res.on('finish', () => socket.end());
  req.push(null);
  handler(req, res);
}

function rawAnswer(socket: Duplex, status: number, reason: string, message: string): void {
  const body = JSON.stringify({ error: { message, type: 'invalid_request_error', code: status === 405 ? 'method_not_allowed' : 'bad_request' } });
  socket.end(`HTTP/1.1 ${status} ${reason}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
}

/** Names a browser may reach this node by: its node name, advertise address, loopback, api.allowed_hosts (lowercase). */
function ownNames(node: ApiNode): Set<string> {
  const names = ['localhost', '127.0.0.1', '::1', node.name, ...node.config.api.allowed_hosts];
  if (node.advertise) names.push(node.advertise);
  return new Set(names.map((n) => n.toLowerCase()));
}

function hostnameOf(hostPort: string): string {
  const m = /^\[([^\]]+)\](?::\d+)?$/.exec(hostPort) ?? /^([^:]+)(?::\d+)?$/.exec(hostPort);
  return (m ? m[1] : hostPort).toLowerCase();
}

const isIpLiteral = (h: string) => net.isIP(h) !== 0;

/**
 * The node's own pages may always write; other origins only when listed in
 * api.cors.allow_origins. "Own" is judged from the node's own names, never
 * from the Host header, which a DNS-rebinding page controls.
 */
function originAllowed(node: ApiNode, origin: string): boolean {
  const allow = node.config.api.cors.allow_origins;
  if (allow.includes(origin) || allow.includes('*')) return true;
  let u: URL;
  try {
    u = new URL(origin);
  } catch {
    return false;
  }
  const host = hostnameOf(u.host);
  return (u.protocol === 'http:' || u.protocol === 'https:') && (ownNames(node).has(host) || isIpLiteral(host)) && Number(u.port || (u.protocol === 'https:' ? 443 : 80)) === node.apiPort;
}

/** A browser (it sends Origin or Sec-Fetch-Site) that reached us by a name we do not answer to: DNS rebinding. */
function rebound(node: ApiNode, req: http.IncomingMessage): string | undefined {
  if (req.headers.origin === undefined && req.headers['sec-fetch-site'] === undefined) return undefined;
  const host = hostnameOf(req.headers.host ?? '');
  if (isIpLiteral(host) || ownNames(node).has(host)) return undefined;
  return host;
}

async function handle(
  node: ApiNode,
  req: http.IncomingMessage,
  res: http.ServerResponse,
  aliasRoutes: AliasRoutes,
): Promise<void> {
  const url = requestUrl(req.url);
  const method = req.method ?? 'GET';
  const origin = req.headers.origin;
  const foreignHost = rebound(node, req);
  if (foreignHost !== undefined) {
    req.resume();
    throw errors.forbiddenHost(foreignHost);
  }
  if (origin && originAllowed(node, origin)) {
    res.setHeader('access-control-allow-origin', origin);
    res.setHeader('vary', 'Origin');
  }
  if (method === 'OPTIONS') {
    if (origin && !originAllowed(node, origin)) throw errors.forbiddenOrigin(origin);
    res.writeHead(204, {
      'access-control-allow-methods': 'GET, POST, PUT, DELETE, OPTIONS',
      'access-control-allow-headers': req.headers['access-control-request-headers'] ?? 'content-type, authorization',
      'access-control-max-age': '600',
    });
    return void res.end();
  }
  if (WRITE_METHODS.has(method) && origin && !originAllowed(node, origin)) {
    req.resume();
    throw errors.forbiddenOrigin(origin);
  }

  // Client keys, when configured: at the entry node only (a verified forward is the mesh's business; its
  // headers are judged in inference.ts, and a client cannot claim to be a forward without them).
  // Then the role table of docs/api.md (keys/access.ts): what the endpoint needs against the key's role.
  let caller: Caller | undefined;
  if (node.keys.enabled && !(isMeshForward(req) && takesMemberCalls(url.pathname, req.url))) {
    const need = needOf(method, url.pathname, node.config.api.protect_ops);
    if (need !== 'open') {
      caller = node.keys.caller(req.headers, dialectOfPath(url.pathname) === 'messages');
      if (!caller) {
        req.resume();
        throw errors.missingClientKey();
      }
      if (!reaches(caller, need)) {
        req.resume();
        throw errors.insufficientScope(caller.name, caller.role, `${method} ${url.pathname}`);
      }
    }
  }

  const endpoint = endpointFor(url.pathname);
  if (endpoint) {
    if (method !== 'POST') {
      req.resume();
      throw errors.methodNotAllowed(method, url.pathname, 'POST');
    }
    // Counted until its answer closes: a drain waits for it (SPEC section 13).
    node.work.hold(res);
    // While the node starts, a request waits for it (SPEC section 4) rather than being refused.
    if (node.phase === 'starting' && node.warming) await node.warming;
    // A client is told the node is stopping; a forward is refused in inference.ts, marked, so its entry node
    // retries it elsewhere (a rolling restart loses nothing).
    if (node.phase !== 'running' && !isMeshForward(req)) throw errors.starting();
    return handleInference(node, req, res, url, endpoint, caller);
  }
  if (url.pathname === '/v1/keys' || url.pathname.startsWith('/v1/keys/')) return handleKeys(node, req, res, url);
  if (url.pathname === LIMITS_PATH) return handleLimits(node, req, res);
  if (url.pathname === DRAIN_PATH) return handleDrain(node, req, res);
  if (url.pathname === KEY_TABLE_PATH) return handleKeyTable(node, req, res);
  if (url.pathname === MOVE_SAVE_PATH || url.pathname === MOVE_TAKE_PATH) return handleCacheMove(node, req, res, url.pathname);
  if (isSplitPath(url.pathname)) return handleSplit(node, req, res, url.pathname);
  if (url.pathname === '/v1/usage' || url.pathname === '/v1/usage/local') return handleUsage(node, req, res, url, caller);
  if (url.pathname === '/v1/aliases' || url.pathname.startsWith('/v1/aliases/')) {
    // A scoped key sees the aliases /v1/models shows it: name and target within its models, fallbacks outside it left out.
    const scope = caller ? <A extends AliasValue>(alias: string, value: A | null) => (value ? scopedAlias(caller, alias, value) : allowsModel(caller, alias) ? null : undefined) : undefined;
    if (await aliasRoutes(req, res, url, scope)) return;
  }
  // --- dashboards (src/ui): GET /, /node, /ui/* ---
  if ((method === 'GET' || method === 'HEAD') && serveUi(url.pathname, res)) return;
  if (isUiPath(url.pathname)) {
    req.resume();
    throw errors.methodNotAllowed(method, url.pathname, 'GET');
  }
  // --- end dashboards ---
  // Model files for members (SPEC section 11); the path names a hash, never a file.
  // The raw path is judged, not the normalised one: `/v1/files/<hash>/../<hash>` names no hash.
  const rawPath = (req.url ?? '/').split('?')[0];
  if (url.pathname.startsWith(FILES_PREFIX) || rawPath.startsWith(FILES_PREFIX)) return node.files.handle(req, res, rawPath);
  if (url.pathname.startsWith(TIMELINE_PREFIX)) {
    if (method !== 'GET' && method !== 'HEAD') {
      req.resume();
      throw errors.methodNotAllowed(method, `${TIMELINE_PREFIX}{id}`, 'GET');
    }
    return handleTimeline(node, req, res, url.pathname);
  }
  const life = url.pathname.startsWith('/v1/models/') ? lifecyclePath(url.pathname) : undefined;
  if (life) return handleLifecycle(node, req, res, life.model, life.action, url);
  if (url.pathname.startsWith('/v1/models/') && (method === 'GET' || method === 'HEAD')) return oneModel(node, res, url, caller);
  const get = GET_ROUTES[url.pathname];
  if (get) {
    if (method !== 'GET' && method !== 'HEAD') {
      req.resume();
      throw errors.methodNotAllowed(method, url.pathname, 'GET');
    }
    return get(node, req, res, url, caller);
  }
  req.resume();
  throw errors.notFound(url.pathname);
}

/**
 * /v1/models as a caller sees it: only the models its key may use, and the
 * aliases whose name and target it may use (SPEC section 12); everything
 * without keys.
 */
function scopedModels(node: ApiNode, caller: Caller | undefined): { object: string; data: { id: string }[] } {
  const all = node.aliases.list();
  if (!caller) return modelsDocument(node, all) as { object: string; data: { id: string }[] };
  // Aliases as the key's scope shows them: an alias's context and workloads come only from what it may run as here.
  const aliases = all.flatMap((a) => scopedAlias(caller, a.name, a) ?? []);
  const doc = modelsDocument(node, aliases) as { object: string; data: { id: string }[] };
  return { ...doc, data: doc.data.filter((m) => allowsModel(caller, m.id)) };
}

/**
 * GET /v1/models/{id}: one entry of /v1/models as the caller's key sees it (a model or an alias; ids may contain
 * "/"), else 404. A name outside the key's scope is 403 `model_not_allowed` whether or not it exists, as on the
 * inference paths, and so is an alias whose target is outside it: the answer tells nothing of what is outside the
 * scope (issue 46: 403 for a model that existed, 404 for one that did not).
 */
function oneModel(node: ApiNode, res: http.ServerResponse, url: RequestUrl, caller: Caller | undefined): void {
  let id: string;
  try {
    id = decodeURIComponent(url.pathname.slice('/v1/models/'.length));
  } catch {
    throw errors.unknownModel(url.pathname.slice('/v1/models/'.length, 200));
  }
  if (caller && !allowsModel(caller, id)) throw errors.modelNotAllowed(caller.name, id);
  const entry = scopedModels(node, caller).data.find((m) => m.id === id);
  if (!entry && caller && node.aliases.get(id)) throw errors.modelNotAllowed(caller.name, id);
  if (!entry) throw errors.unknownModel(id.slice(0, 200));
  sendJson(res, 200, entry);
}

/** A request that claims to come from a member: its forward headers decide (inference.ts); never a client key. */
function isMeshForward(req: http.IncomingMessage): boolean {
  return classifyForwardHeaders(req.headers) !== 'none';
}

/**
 * The paths members call on each other, each of which judges a request's
 * forward headers itself (verified, else 401): inference, limit reports,
 * usage rows, load and unload, model files, timelines, capacity. Anywhere
 * else forward headers are no credential at all: the key check holds, or
 * an `X-Viiwork-Node` header alone would open the key and admin endpoints
 * to anyone.
 */
export function takesMemberCalls(pathname: string, rawUrl = pathname): boolean {
  return (
    endpointFor(pathname) !== undefined ||
    pathname === LIMITS_PATH ||
    pathname === KEY_TABLE_PATH ||
    pathname === MOVE_SAVE_PATH ||
    pathname === MOVE_TAKE_PATH ||
    isSplitPath(pathname) ||
    pathname === '/v1/usage/local' ||
    pathname === '/v1/capacity' ||
    (pathname.startsWith('/v1/models/') && lifecyclePath(pathname) !== undefined) ||
    pathname.startsWith(TIMELINE_PREFIX) ||
    (pathname.startsWith(FILES_PREFIX) && rawUrl.startsWith(FILES_PREFIX))
  );
}

/** The longest a member may hold a capacity poll waiting for a slot to free. */
export const CAPACITY_WAIT_MAX_MS = 2000;

/**
 * GET /v1/capacity: this node's report. With `?wait=<model>&ms=<n>` (a member
 * whose requests are waiting for this node's slots), the answer is held until
 * one of this node's slots is released, or `ms` (at most 2 s) passed: the
 * member learns of a free slot when it frees, not at its next poll.
 */
async function capacity(node: ApiNode, req: http.IncomingMessage, res: http.ServerResponse, url: RequestUrl): Promise<void> {
  const model = url.searchParams.get('wait');
  const ms = Math.min(CAPACITY_WAIT_MAX_MS, Math.max(0, Number(url.searchParams.get('ms')) || 0));
  if (model && ms > 0) await node.slotReleased(model, ms);
  // A member's poll comes from its advertise address: it is told which busy slots are its own forwards'.
  if (!res.destroyed) sendJson(res, 200, node.capacityReport(parseHeld(url.searchParams.get('digests')), node.members.peerAt(clientAddress(req))));
}

function health(node: ApiNode, _req: http.IncomingMessage, res: http.ServerResponse): void {
  // A draining node answers 503 `draining`: a load balancer in front of the mesh takes it out of its rotation.
  const ok = node.phase === 'running' && node.warming === undefined && !node.draining;
  const backends = node.backends.map((b) => ({ id: b.id, model: b.info.model, engine: b.info.engine, state: b.state, reason: b.reason }));
  const models: Record<string, { backends: number; healthy_backends: number }> = {};
  for (const b of node.backends) {
    const m = (models[b.info.model] ??= { backends: 0, healthy_backends: 0 });
    m.backends++;
    if (b.state === 'healthy') m.healthy_backends++;
  }
  const serving = backends.some((b) => b.state === 'healthy');
  sendJson(res, ok ? 200 : 503, {
    status: ok ? 'ok' : node.phase === 'running' ? (node.draining ? 'draining' : 'starting') : node.phase,
    node: node.name,
    version: node.version,
    role: node.config.models.length ? 'node' : 'gateway',
    serving,
    models,
    backends,
  });
}

async function metrics(node: ApiNode, req: http.IncomingMessage, res: http.ServerResponse, _url: RequestUrl, caller: Caller | undefined): Promise<void> {
  for (const q of node.queues.entries()) node.metrics.queueDepth.set({ model: q.model, workload: q.workload }, q.depth);
  node.metrics.reportAge.reset();
  for (const m of node.members.peers()) {
    const r = node.poller?.get(m.name);
    if (r) node.metrics.reportAge.set({ member: m.name }, Math.max(0, node.now() - r.polledAt) / 1000);
  }
  for (const [state, n] of Object.entries(node.members.counts())) node.metrics.members.set({ state }, n);
  const memory = node.capacityReport().memory;
  if (memory) for (const kind of ['budget', 'used', 'free'] as const) node.metrics.memoryBytes.set({ kind }, memory[kind]);
  if (memory) node.metrics.memoryBytes.set({ kind: 'lent' }, memory.lent ?? 0);
  const text = await node.metrics.registry.metrics();
  res.writeHead(200, { 'content-type': node.metrics.registry.contentType });
  // /metrics is open unless api.protect_ops, but a key's usage is for that key and admins (SPEC 12, issue 46): the
  // per-key series are filtered by the key the scraper presents, asked for here even where the path needs none.
  const who = !node.keys.enabled ? 'all' : (caller ?? node.keys.caller(req.headers, false));
  res.end(who === 'all' || who?.role === 'admin' ? text : keySeriesOf(text, who?.name));
}

const KEY_SERIES = /^viiwork_key_[a-z_]+\{(?:[^}]*,)?key="([^"]*)"/;

/** The exposition without other keys' per-key samples: only `key`'s (none for a scraper without a key). */
export function keySeriesOf(text: string, key: string | undefined): string {
  return text
    .split('\n')
    .filter((line) => {
      const m = KEY_SERIES.exec(line);
      return m === null || m[1] === key;
    })
    .join('\n');
}

