/**
 * Turning an HTTP request on an inference path into what routing needs
 * (SPEC section 9, step 1): workload, model, stream flag, prompt size,
 * session key, pin and preferences. Every malformed input is a 400 here.
 */
import type http from 'node:http';
import { NODE_NAME } from '../config/schema.ts';
import { estimateTokens } from '../prompt/tokens.ts';
import type { Endpoint } from '../workloads/workloads.ts';
import { errors } from '../http/errors.ts';
import { boundaryOf, textField } from '../http/multipart.ts';
import { lastSpan, SCAN_SLICE, scanJsonObject, scanJsonObjectSliced, valueOf, type ScannedObject } from '../http/json-scan.ts';
import type { DispatchRequest } from '../dispatch/types.ts';
import { clientWantsUsage } from '../dispatch/execute/upstream-body.ts';

export const MAX_NAMES = 8;

/** Bounds on what a request may carry (api.max_model_name, api.max_json_depth). */
export interface RequestLimits {
  maxModelName: number;
  maxJsonDepth: number;
}

export const DEFAULT_LIMITS: RequestLimits = { maxModelName: 256, maxJsonDepth: 64 };

function checkName(where: string, value: string): string {
  if (!NODE_NAME.test(value)) throw errors.badName(where, value);
  return value;
}

function header(req: http.IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

export function parseRouting(req: http.IncomingMessage, url: URL): Pick<DispatchRequest, 'sessionKey' | 'pin' | 'prefer'> {
  const hosts = url.searchParams.getAll('host');
  if (hosts.length > 1) throw errors.tooManyNames('?host');
  const pin = hosts.length ? checkName('?host', hosts[0]) : undefined;
  const preferText = url.searchParams.has('prefer') ? url.searchParams.getAll('prefer').join(',') : header(req, 'x-viiwork-prefer');
  const where = url.searchParams.has('prefer') ? '?prefer' : 'X-Viiwork-Prefer';
  const prefer = preferText === undefined ? [] : preferText.split(',').map((s) => s.trim()).filter(Boolean);
  if (prefer.length > MAX_NAMES) throw errors.tooManyNames(where);
  for (const p of prefer) checkName(where, p);
  const sessionKey = header(req, 'x-session-affinity') || header(req, 'x-session-id') || undefined;
  return { sessionKey, pin, prefer };
}

/** A session key longer than this (from a body field or an agent's header) is not used as one. */
export const SESSION_KEY_MAX = 512;

/**
 * The session key after the session headers (SPEC section 9, step 6, and
 * section 4): the body's `prompt_cache_key` (OpenAI's Chat Completions and
 * Responses), then an agent client's own session header: Claude Code's
 * `x-claude-code-session-id`, Codex's `session-id`.
 */
export function agentSessionKey(req: http.IncomingMessage, body: Buffer, scan: ScannedObject | undefined): string | undefined {
  const span = scan ? lastSpan(scan, 'prompt_cache_key') : undefined;
  if (span && span.end - span.start <= SESSION_KEY_MAX + 2) {
    const v = valueOf(body, span);
    if (typeof v === 'string' && v !== '') return v;
  }
  for (const name of ['x-claude-code-session-id', 'session-id']) {
    const v = header(req, name);
    if (v && v.length <= SESSION_KEY_MAX) return v;
  }
  return undefined;
}

export async function parseInference(req: http.IncomingMessage, url: URL, endpoint: Endpoint, body: Buffer, limits: RequestLimits = DEFAULT_LIMITS): Promise<DispatchRequest> {
  const contentType = header(req, 'content-type') ?? '';
  const routing = parseRouting(req, url);
  if (endpoint.workload === 'transcription' && /^multipart\/form-data/i.test(contentType)) {
    const boundary = boundaryOf(contentType);
    const model = boundary ? textField(body, boundary, 'model')?.trim() : undefined;
    if (!model) throw errors.missingModel();
    if (Buffer.byteLength(model) > limits.maxModelName) throw errors.modelNameTooLong(limits.maxModelName);
    const stream = boundary ? textField(body, boundary, 'stream')?.trim() === 'true' : false;
    return { path: url.pathname, endpoint, model, stream, promptTokens: undefined, ...routing, body, scan: undefined, contentType, clientWantsUsage: false };
  }
  // No tree of the body is built: one bounded pass finds the members routing needs, and the bytes stay as sent.
  // A large body is scanned in slices, so no body shape holds the event loop (and gossip) for long.
  const scanned = body.length > SCAN_SLICE ? await scanJsonObjectSliced(body, limits.maxJsonDepth) : scanJsonObject(body, limits.maxJsonDepth);
  if (!scanned.ok) {
    if (scanned.problem === 'depth') throw errors.tooDeep(limits.maxJsonDepth);
    if (scanned.problem === 'not-object') throw errors.notAnObject();
    throw errors.malformedJson(scanned.detail);
  }
  const scan = scanned.object;
  const modelSpan = lastSpan(scan, 'model');
  // The name is bounded before it is decoded (its raw bytes can only shrink when decoded).
  if (modelSpan && modelSpan.end - modelSpan.start > limits.maxModelName * 6 + 2) throw errors.modelNameTooLong(limits.maxModelName);
  const model = modelSpan ? valueOf(body, modelSpan) : undefined;
  if (typeof model !== 'string' || model.length === 0) throw errors.missingModel();
  if (Buffer.byteLength(model) > limits.maxModelName) throw errors.modelNameTooLong(limits.maxModelName);
  const streamSpan = lastSpan(scan, 'stream');
  const stream = streamSpan !== undefined && streamSpan.end - streamSpan.start === 4 && body.toString('latin1', streamSpan.start, streamSpan.end) === 'true';
  return {
    path: url.pathname,
    endpoint,
    model,
    stream,
    promptTokens: estimateTokens(body.length),
    ...routing,
    sessionKey: routing.sessionKey ?? agentSessionKey(req, body, scan),
    body,
    scan,
    contentType: contentType || 'application/json',
    clientWantsUsage: clientWantsUsage(body, scan),
  };
}
