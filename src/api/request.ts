/**
 * Turning an HTTP request on an inference path into what routing needs
 * (SPEC section 9, step 1): workload, model, stream flag, prompt size,
 * session key, pin and preferences. Every malformed input is a 400 here.
 */
import type http from 'node:http';
import { NODE_NAME } from '../config/schema.ts';
import type { Workload } from '../workloads/workloads.ts';
import { errors } from './errors.ts';
import { boundaryOf, textField } from './multipart.ts';

export const MAX_NAMES = 8;

export interface InferenceRequest {
  path: string;
  /** Path with query, as received (minus routing parameters are kept: engines ignore them). */
  workload: Workload;
  model: string;
  stream: boolean;
  /** JSON body bytes ÷ 4; undefined for uploads. */
  promptTokens: number | undefined;
  sessionKey: string | undefined;
  pin: string | undefined;
  prefer: string[];
  body: Buffer;
  /** The parsed JSON body (undefined for multipart uploads). */
  json: Record<string, unknown> | undefined;
  contentType: string;
  /** The client asked for usage in the stream itself. */
  clientWantsUsage: boolean;
}

function checkName(where: string, value: string): string {
  if (!NODE_NAME.test(value)) throw errors.badName(where, value);
  return value;
}

function header(req: http.IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

export function parseRouting(req: http.IncomingMessage, url: URL): Pick<InferenceRequest, 'sessionKey' | 'pin' | 'prefer'> {
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

export function parseInference(req: http.IncomingMessage, url: URL, workload: Workload, body: Buffer): InferenceRequest {
  const contentType = header(req, 'content-type') ?? '';
  const routing = parseRouting(req, url);
  if (workload === 'transcription' && /^multipart\/form-data/i.test(contentType)) {
    const boundary = boundaryOf(contentType);
    const model = boundary ? textField(body, boundary, 'model')?.trim() : undefined;
    if (!model) throw errors.missingModel();
    const stream = boundary ? textField(body, boundary, 'stream')?.trim() === 'true' : false;
    return { path: url.pathname, workload, model, stream, promptTokens: undefined, ...routing, body, json: undefined, contentType, clientWantsUsage: false };
  }
  let json: unknown;
  try {
    json = JSON.parse(body.toString('utf8'));
  } catch (err) {
    throw errors.malformedJson((err as Error).message);
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json)) throw errors.notAnObject();
  const obj = json as Record<string, unknown>;
  if (typeof obj.model !== 'string' || obj.model.length === 0) throw errors.missingModel();
  const so = obj.stream_options as { include_usage?: unknown } | undefined;
  return {
    path: url.pathname,
    workload,
    model: obj.model,
    stream: obj.stream === true,
    promptTokens: Math.ceil(body.length / 4),
    ...routing,
    body,
    json: obj,
    contentType: contentType || 'application/json',
    clientWantsUsage: so?.include_usage === true,
  };
}
