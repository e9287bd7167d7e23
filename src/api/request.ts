/**
 * Turning an HTTP request on an inference path into what routing needs
 * (SPEC section 9, step 1): workload, model, stream flag, prompt size,
 * session key, pin and preferences. Every malformed input is a 400 here.
 */
import type http from 'node:http';
import { NODE_NAME } from '../config/schema.ts';
import { estimateTokens } from '../prompt/tokens.ts';
import type { Endpoint } from '../workloads/workloads.ts';
import type { Priority } from '../config/key-spec.ts';
import { errors } from '../http/errors.ts';
import { boundaryOf, textField, textFieldCount } from '../http/multipart.ts';
import { lastSpan, SCAN_SLICE, scanJsonObject, scanJsonObjectSliced, valueOf, type ScannedObject } from '../http/json-scan.ts';
import type { DispatchRequest } from '../dispatch/types.ts';
import { clientWantsUsage } from '../dispatch/execute/upstream-body.ts';
import type { RequestUrl } from './request-url.ts';

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

export function parseRouting(req: http.IncomingMessage, url: RequestUrl): Pick<DispatchRequest, 'sessionKey' | 'pin' | 'prefer' | 'traceparent'> {
  const hosts = url.searchParams.getAll('host');
  if (hosts.length > 1) throw errors.tooManyNames('?host');
  const pin = hosts.length ? checkName('?host', hosts[0]) : undefined;
  const preferText = url.searchParams.has('prefer') ? url.searchParams.getAll('prefer').join(',') : header(req, 'x-viiwork-prefer');
  const where = url.searchParams.has('prefer') ? '?prefer' : 'X-Viiwork-Prefer';
  const prefer = preferText === undefined ? [] : preferText.split(',').map((s) => s.trim()).filter(Boolean);
  if (prefer.length > MAX_NAMES) throw errors.tooManyNames(where);
  for (const p of prefer) checkName(where, p);
  const sessionKey = header(req, 'x-session-affinity') || header(req, 'x-session-id') || undefined;
  const tp = req.headers.traceparent;
  return { sessionKey, pin, prefer, traceparent: typeof tp === 'string' ? tp : undefined };
}

/** A session key longer than this (from a body field or an agent's header) is not used as one. */
export const SESSION_KEY_MAX = 512;

/**
 * The session key after the session headers (SPEC section 9, step 6, and
 * section 4): the body's `prompt_cache_key` (OpenAI's Chat Completions and
 * Responses), then an agent client's own session header: Claude Code's
 * `x-claude-code-session-id`, Codex's `session-id` (`session_id` in its
 * earlier releases, which carry no prompt_cache_key on every path).
 */
export function agentSessionKey(req: http.IncomingMessage, body: Buffer, scan: ScannedObject | undefined): string | undefined {
  const span = scan ? lastSpan(scan, 'prompt_cache_key') : undefined;
  if (span && span.end - span.start <= SESSION_KEY_MAX + 2) {
    const v = valueOf(body, span);
    if (typeof v === 'string' && v !== '') return v;
  }
  for (const name of ['x-claude-code-session-id', 'session-id', 'session_id']) {
    const v = header(req, name);
    if (v && v.length <= SESSION_KEY_MAX) return v;
  }
  return undefined;
}

/**
 * The priority a request asks for (SPEC section 12): `X-Viiwork-Priority`,
 * else `"priority": "batch"` (or `"interactive"`) in the body; undefined
 * when neither. A header that names no priority is a 400; any other body
 * `priority` (vLLM's integer, say) belongs to the engine and is left alone.
 */
export function askedPriority(headerValue: string | string[] | undefined, body: Buffer, scan: ScannedObject | undefined): Priority | undefined {
  const h = Array.isArray(headerValue) ? headerValue[0] : headerValue;
  if (h !== undefined) {
    const v = h.trim().toLowerCase();
    if (v === 'interactive' || v === 'batch') return v;
    throw errors.badPriority('X-Viiwork-Priority', v.slice(0, 40));
  }
  const span = scan ? lastSpan(scan, 'priority') : undefined;
  const v = span && span.end - span.start <= 16 ? valueOf(body, span) : undefined;
  return v === 'interactive' || v === 'batch' ? v : undefined;
}

export async function parseInference(req: http.IncomingMessage, url: RequestUrl, endpoint: Endpoint, body: Buffer, limits: RequestLimits = DEFAULT_LIMITS): Promise<DispatchRequest> {
  const contentType = header(req, 'content-type') ?? '';
  const routing = parseRouting(req, url);
  if (endpoint.workload === 'transcription' && /^multipart\/form-data/i.test(contentType)) {
    const boundary = boundaryOf(contentType);
    const model = boundary ? textField(body, boundary, 'model')?.trim() : undefined;
    if (!model) throw errors.missingModel();
    // The name routed, scoped and rewritten for an alias is the first; an engine may read the last.
    if (textFieldCount(body, boundary!, 'model') > 1) throw errors.repeatedModel();
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
  const maxTokens = boundedOutput(body, scan);
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
    ...(maxTokens !== undefined ? { maxTokens } : {}),
  };
}

/** Bound fields an engine may honour: OpenAI's (chat, completions, Responses), Anthropic's, and llama-server's own. */
const OUTPUT_BOUNDS = ['max_completion_tokens', 'max_tokens', 'max_output_tokens', 'n_predict'];
/** `n` choices multiply what a request may generate (OpenAI's chat and completions, vLLM); more than this is the engine's to refuse. */
const MAX_CHOICES = 128;

/**
 * The output bound a body sets (chat, completions, Responses, Messages),
 * for fair queueing's and limits' estimates: the largest of the bound
 * fields it sets, so a small `max_completion_tokens` cannot stand for the
 * charge while an engine honours a large `max_tokens` or `n_predict`;
 * times `n` choices. A bound of any size counts (one too large for an
 * integer as the largest integer: a charge no limit admits), never as no
 * bound; so does a numeral in a string.
 */
function boundedOutput(body: Buffer, scan: ScannedObject): number | undefined {
  let bound: number | undefined;
  for (const field of OUTPUT_BOUNDS) {
    const span = lastSpan(scan, field);
    if (!span || span.end - span.start > 400) continue;
    const raw = valueOf(body, span);
    // A numeral in a string is a number to engines that coerce (pydantic's, vLLM's).
    const v = typeof raw === 'string' && /^\s*\d+(\.\d+)?\s*$/.test(raw) ? Number(raw) : raw;
    if (typeof v !== 'number' || Number.isNaN(v) || v < 1) continue;
    const n = v > Number.MAX_SAFE_INTEGER ? Number.MAX_SAFE_INTEGER : Math.ceil(v);
    bound = Math.max(bound ?? 0, n);
  }
  if (bound === undefined) return undefined;
  const span = lastSpan(scan, 'n');
  const n = span && span.end - span.start <= 12 ? valueOf(body, span) : undefined;
  const choices = typeof n === 'number' && Number.isSafeInteger(n) && n > 1 ? Math.min(n, MAX_CHOICES) : 1;
  return Math.min(Number.MAX_SAFE_INTEGER, bound * choices);
}
