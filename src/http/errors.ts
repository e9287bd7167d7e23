/**
 * Every error a client can get (SPEC section 4), in OpenAI's shape. One
 * constructor per case, so the status, type, code and Retry-After of a case
 * live in exactly one place.
 */
import type http from 'node:http';
import type { ErrorShape } from '../workloads/workloads.ts';
import { RES_REFUSED } from './viiwork-headers.ts';

export type { ErrorShape };

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type: string,
    readonly code: string | null,
    readonly retryAfter?: number,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = 'ApiError';
  }

  body(): { error: { message: string; type: string; code: string | null } } {
    return { error: { message: this.message, type: this.type, code: this.code } };
  }
}

const invalid = (status: number, message: string, code: string | null) => new ApiError(status, message, 'invalid_request_error', code);

const ENGINE_FAILED = 'the engine failed before answering: ';

/**
 * The engine's own text in an executor's marked 502: its message without the
 * words engineFailed put in front, so the entry node, which adds them again,
 * does not say them twice.
 */
export function engineFailureDetail(message: string): string {
  return message.startsWith(ENGINE_FAILED) ? message.slice(ENGINE_FAILED.length) : message;
}

export const errors = {
  malformedJson: (detail: string) => invalid(400, `the request body is not valid JSON (${detail}); send a JSON object`, 'invalid_json'),
  notAnObject: () => invalid(400, 'the request body must be a JSON object', 'invalid_json'),
  missingModel: () => invalid(400, 'the request has no "model": name one of the models listed by GET /v1/models', 'missing_model'),
  repeatedModel: () => invalid(400, 'the upload has more than one "model" field; send exactly one', 'repeated_model'),
  badName: (where: string, value: string) =>
    invalid(400, `${where} "${value.slice(0, 80)}" is not a node name: names match [A-Za-z0-9][A-Za-z0-9._-]{0,62} (addresses are never accepted)`, 'invalid_host'),
  tooManyNames: (where: string) => invalid(400, `${where} names more than 8 nodes; name at most 8`, 'invalid_host'),
  unsupportedWorkload: (model: string, workload: string, where = 'any live member') =>
    invalid(400, `model "${model}" is not served for ${workload} by ${where}; GET /v1/models lists each model's workloads`, 'unsupported_workload'),
  missingClientKey: () =>
    new ApiError(401, 'this node needs an API key: send Authorization: Bearer <key> (or x-api-key: <key> on /v1/messages; the keys are in api.keys_env or api.keys_file on the node)', 'authentication_error', 'invalid_api_key', undefined, {
      'www-authenticate': 'Bearer',
    }),
  /** SPEC section 12: a key whose role does not reach the endpoint (the code is in the message too, for Anthropic's shape). */
  insufficientScope: (key: string, role: string, what: string) =>
    new ApiError(403, `insufficient_scope: key "${key}" has role ${role}; ${what} needs an admin key (an admin can run viiwork keys set ${key} --role admin)`, 'permission_error', 'insufficient_scope'),
  /** SPEC section 12: a model (or the model an alias runs as) outside the key's `models`. */
  modelNotAllowed: (key: string, model: string) =>
    new ApiError(403, `model_not_allowed: key "${key}" may not use model "${model.slice(0, 200)}"; GET /v1/models lists the models it may use (an admin widens it with viiwork keys set ${key} --models ...)`, 'permission_error', 'model_not_allowed'),
  badPriority: (where: string, value: string) => invalid(400, `${where} is "${value}": a request's priority is interactive or batch`, 'invalid_priority'),
  /** A forward naming a key this executor does not hold (revoked, or not yet heard of): relayed to the client as its answer. */
  revokedKey: (name: string) => new ApiError(401, `key "${name.slice(0, 80)}" has been revoked; ask an admin for a key (viiwork keys add)`, 'authentication_error', 'invalid_api_key'),
  /** SPEC section 12: a request that would pass one of its key's limits (held across the mesh). */
  keyLimit: (key: string, limit: string, what: string, retryAfterS: number) =>
    new ApiError(429, `key "${key}" is over its ${limit} limit (${what}, across the mesh); retry in ${retryAfterS} s`, 'rate_limit_error', 'key_limit', retryAfterS, { 'x-viiwork-limit': limit }),
  invalidUsageQuery: (message: string) => invalid(400, message, 'invalid_usage_query'),
  invalidKey: (message: string) => invalid(400, message, 'invalid_key'),
  unknownKey: (name: string) => invalid(404, `no key named "${name.slice(0, 80)}"; GET /v1/keys lists them`, 'key_not_found'),
  keyExists: (message: string) => invalid(409, message, 'key_exists'),
  unauthorized: (why: string) => new ApiError(401, `forward rejected: ${why}`, 'authentication_error', 'unauthorized', undefined, { [RES_REFUSED]: 'auth' }),
  forbiddenOrigin: (origin: string) =>
    new ApiError(403, `writes from origin ${origin} are not allowed; add it to api.cors.allow_origins to permit it`, 'permission_error', 'forbidden_origin'),
  forbiddenHost: (host: string) =>
    new ApiError(403, `a browser reached this node as "${host.slice(0, 80)}", which is not one of its names; add it to api.allowed_hosts to permit it`, 'permission_error', 'forbidden_host'),
  forbiddenLifecycle: () =>
    new ApiError(403, 'loading and unloading models is for members, clients with a key (api.keys_env, api.keys_file) or this machine; run the viiwork CLI on the node itself', 'permission_error', 'forbidden'),
  modelBusy: (model: string) => new ApiError(409, `model "${model}" has requests running or queued here; it is unloaded once idle`, 'invalid_request_error', 'model_busy'),
  modelAlways: (model: string) => new ApiError(409, `model "${model}" is load: always here and is never unloaded; set load: on_demand to unload it`, 'invalid_request_error', 'model_always'),
  modelUnloading: (model: string) => new ApiError(409, `model "${model}" is being unloaded here; ask again when it is unloaded`, 'invalid_request_error', 'model_unloading', 1),
  forbiddenRemoteWrite: (what: 'alias' | 'key' = 'alias') =>
    new ApiError(
      403,
      what === 'alias'
        ? 'alias changes are accepted only from this machine; run the viiwork CLI on the node itself'
        : 'the mesh has no keys yet: the first key is made only from a node’s own machine (viiwork keys add NAME --role admin there)',
      'permission_error',
      'forbidden',
    ),
  unknownModel: (model: string) => invalid(404, `model "${model}" is not served by any member of this mesh; GET /v1/models lists them`, 'model_not_found'),
  unknownHost: (host: string, model: string) => invalid(404, `no member named "${host}" serves model "${model}"`, 'host_not_found'),
  /** GET /v1/files/{sha256} from anyone but a member (SPEC section 11). */
  forbiddenFiles: (why: string) =>
    new ApiError(403, `model files are served to members of this mesh only (${why})`, 'permission_error', 'forbidden'),
  unknownFile: (what: string) => invalid(404, `no model file with SHA-256 "${what.slice(0, 80)}" is served here; /v1/capacity lists the files of each member`, 'file_not_found'),
  fileQuery: () => invalid(400, 'GET /v1/files/{sha256} takes no query string; ask for /v1/files/<sha256> alone (a byte range goes in the Range header)', 'query_not_allowed'),
  badRange: (size: number) => new ApiError(416, `the Range asked for lies outside the file (${size} bytes)`, 'invalid_request_error', 'range_not_satisfiable', undefined, { 'content-range': `bytes */${size}` }),
  transfersBusy: (n: number) =>
    new ApiError(429, `this node is already sending ${n} model files; fetch from another member or retry`, 'rate_limit_error', 'transfers_busy', 5, { [RES_REFUSED]: 'transfers' }),
  notFound: (path: string) => invalid(404, `no such endpoint: ${path}`, 'not_found'),
  methodNotAllowed: (method: string, path: string, allow: string) =>
    new ApiError(405, `${method} is not allowed on ${path}; use ${allow}`, 'invalid_request_error', 'method_not_allowed', undefined, { allow }),
  bodyIdle: (ms: number) => new ApiError(408, `the request body stopped arriving for ${ms} ms (api.body_idle_timeout); send it whole`, 'invalid_request_error', 'request_timeout', undefined, { connection: 'close' }),
  bodyDeadline: (ms: number) =>
    new ApiError(408, `the request body did not arrive whole within ${ms} ms of its headers (api.body_timeout); send it faster, or in smaller requests`, 'invalid_request_error', 'request_timeout', 1, { connection: 'close' }),
  tooManyBodies: (n: number) =>
    new ApiError(503, `this client address already has ${n} request bodies arriving (api.max_open_bodies); finish those uploads first, then retry`, 'server_error', 'too_many_uploads', 1, { connection: 'close' }),
  badEncoding: (coding: string, detail: string) =>
    invalid(400, `the request body is not valid ${coding} (${detail.slice(0, 120)}), as its Content-Encoding says; send it encoded so, or without Content-Encoding`, 'invalid_encoding'),
  unsupportedEncoding: (coding: string) =>
    invalid(415, `Content-Encoding "${coding.slice(0, 40)}" is not supported: send the body as gzip, deflate or unencoded (identity)`, 'unsupported_encoding'),
  tooLarge: (limit: number, decoded = false) => invalid(413, `the request body${decoded ? ' decoded from its Content-Encoding' : ''} is larger than api.max_body (${limit} bytes)`, 'request_too_large'),
  forwardWaited: (ms: number) =>
    new ApiError(429, `no slot of this node freed for the forwarded request within the ${ms} ms it could wait (or one that ranks higher took its place); the entry node places it again`, 'rate_limit_error', 'no_free_slot', 1, { [RES_REFUSED]: 'waited' }),
  /** A forward whose slot here would destroy a live conversation's cache its entry priced as free (SPEC 9.6, "Eviction"): placed again on fresher prices. */
  forwardEvicts: (tokens: number, priced: number) =>
    new ApiError(
      429,
      `running the forwarded request here would evict a live conversation's cached prompt (an expected ${Math.round(tokens)} tokens of re-prefill; the entry priced ${Math.round(priced)}); the entry node prices it again`,
      'rate_limit_error',
      'no_free_slot',
      1,
      { [RES_REFUSED]: 'evicts' },
    ),
  /** A forward that reaches a draining node (its entry's view is older than the drain): marked, so the entry places it elsewhere. */
  forwardDraining: (node: string) =>
    new ApiError(503, `node "${node}" is draining and takes no new work; the entry node places the request elsewhere`, 'server_error', 'draining', 1, { [RES_REFUSED]: 'draining' }),
  forwardNoSlot: () =>
    new ApiError(429, 'this node has no free slot for the forwarded request; the entry node retries elsewhere', 'rate_limit_error', 'no_free_slot', 1, { [RES_REFUSED]: 'full' }),
  queueFull: (model: string) => new ApiError(429, `every slot for "${model}" is busy and its queue is full; retry later`, 'rate_limit_error', 'queue_full', 2),
  queueTimeout: (model: string, ms: number) =>
    new ApiError(429, `every slot for "${model}" stayed busy for ${ms} ms (routing.queue_timeout; routing.batch_queue_timeout for batch requests); retry later`, 'rate_limit_error', 'queue_timeout', 2),
  queueTimeoutRefused: (model: string, ms: number) =>
    new ApiError(503, `no host accepted the request for "${model}" within ${ms} ms (forwards were refused); retry later`, 'server_error', 'queue_timeout', 2),
  noHealthyBackend: (model: string) =>
    new ApiError(503, `model "${model}" has no healthy backend anywhere in the mesh; check the engines (GET /health on each node)`, 'server_error', 'no_healthy_backend', 5),
  modelLoading: (model: string, ms: number) =>
    new ApiError(503, `model "${model}" is still loading: no backend became ready within ${ms} ms (routing.queue_timeout); retry shortly`, 'server_error', 'model_loading', 5),
  loadTimeout: (model: string, ms: number) =>
    new ApiError(503, `model "${model}" is still loading: it was not ready within ${ms} ms (routing.load_wait); retry shortly`, 'server_error', 'model_loading', 5),
  /** An on-demand model no host could load while the request waited (every host refused for memory). */
  noRoomToLoad: (model: string, ms: number, why: string) =>
    new ApiError(503, `no member has room to load "${model}" (the request waited ${ms} ms): ${why.slice(0, 1024)}; retry when a member frees memory or one that lends memory (node.lend_memory) joins`, 'server_error', 'insufficient_memory', 5),
  loadFailed: (model: string, text: string) =>
    new ApiError(503, `loading model "${model}" failed: ${text.slice(0, 1024)}; the next request tries again (another host first)`, 'server_error', 'model_load_failed', 2),
  /** A host asked to load a model it cannot fit even after unloading every idle on-demand model (SPEC section 11). */
  loadNoRoom: (model: string, detail: string) =>
    new ApiError(503, `this node cannot fit "${model}": ${detail}; the entry node asks another host`, 'server_error', 'insufficient_memory', 5, { [RES_REFUSED]: 'memory' }),
  forwardLacksModel: (model: string, workload: string) =>
    new ApiError(503, `this node does not serve "${model}" for ${workload}; the entry node retries elsewhere`, 'server_error', 'model_not_here', 1, { [RES_REFUSED]: 'workload' }),
  invalidAlias: (detail: string) => invalid(400, `invalid alias request: ${detail}`, 'invalid_alias'),
  unknownAlias: (alias: string) => invalid(404, `no alias named "${alias.slice(0, 80)}"; GET /v1/aliases lists them`, 'alias_not_found'),
  nothingToRevert: (alias: string) => invalid(409, `alias "${alias.slice(0, 80)}" has no earlier value in this node's history to restore`, 'nothing_to_revert'),
  aliasUnserved: (alias: string) => new ApiError(503, `alias "${alias}": none of its targets is served now`, 'server_error', 'alias_unserved', 5),
  /** The engine failed before its first byte and no route is left; `forward`: this node is the executor of a forward (marked, so the entry retries elsewhere). */
  engineFailed: (detail: string, forward = false) =>
    new ApiError(502, `${ENGINE_FAILED}${detail}`, 'server_error', 'engine_failed', undefined, forward ? { [RES_REFUSED]: 'engine' } : {}),
  modelNameTooLong: (limit: number) => invalid(400, `"model" is longer than ${limit} bytes (api.max_model_name); name one of the models listed by GET /v1/models`, 'invalid_model'),
  tooDeep: (limit: number) => invalid(400, `the request body nests deeper than ${limit} levels (api.max_json_depth)`, 'invalid_json'),
  starting: () => new ApiError(503, 'the node is starting or stopping', 'server_error', 'unavailable', 1),
  /** Every host that could run the request is draining (SPEC section 13): it will be back, or others will take its place. */
  draining: (model: string, hosts: readonly string[]) =>
    new ApiError(503, `every host of "${model}" that could run this request is draining (${hosts.slice(0, 8).join(', ')}); retry shortly`, 'server_error', 'draining', 5),
  forbiddenDrain: () =>
    new ApiError(403, 'a drain is for an admin key (api.keys_env, api.keys_file) or this machine; run viiwork drain on the node itself', 'permission_error', 'forbidden'),
};

/** Anthropic's error type for a status (the SDKs pick their error class by status; the type says the same in words). */
export function anthropicErrorType(status: number): string {
  switch (status) {
    case 401:
      return 'authentication_error';
    case 403:
      return 'permission_error';
    case 404:
      return 'not_found_error';
    case 413:
      return 'request_too_large';
    case 429:
      return 'rate_limit_error';
    case 503:
    case 529:
      return 'overloaded_error';
    default:
      return status >= 500 ? 'api_error' : 'invalid_request_error';
  }
}

/** `{"type":"error","error":{"type":…,"message":…}}`, Anthropic's error body. */
export function anthropicErrorBody(status: number, message: string): { type: 'error'; error: { type: string; message: string } } {
  return { type: 'error', error: { type: anthropicErrorType(status), message } };
}

export function sendError(res: http.ServerResponse, err: ApiError, extraHeaders: Record<string, string> = {}, shape: ErrorShape = 'openai'): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const text = JSON.stringify(shape === 'anthropic' ? anthropicErrorBody(err.status, err.message) : err.body());
  const headers: Record<string, string | number> = Object.assign({}, extraHeaders, err.headers, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  if (err.retryAfter !== undefined) headers['retry-after'] = String(err.retryAfter);
  res.writeHead(err.status, headers);
  res.end(text);
}

export function sendJson(res: http.ServerResponse, status: number, body: unknown, extraHeaders: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, Object.assign({}, extraHeaders, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) }));
  res.end(text);
}
