/**
 * Usage (SPEC section 12):
 *
 *   GET  /v1/usage?since=…&key=…&by=hour   {"object":"usage","since":ms,"rows":[{key,model,host,[hour],requests,errors,limited,prompt_cached,prompt_uncached,completion}],"missing":[members that did not answer]}
 *   POST /v1/usage/local                   members only: this node's rows, {"rows":[…]}
 *
 * `since`: as every endpoint takes it (config/units.ts parseSince: `24h` or `-24h`, an
 * ISO date, ms since the epoch); default 24h; rollups are hourly and kept
 * 30 days.
 * A user key sees its own usage only; another `key` needs an admin key.
 */
import type http from 'node:http';
import { judgeForward } from '../forward/verify.ts';
import { readBody } from '../http/body.ts';
import { ApiError, errors, sendJson } from '../http/errors.ts';
import type { Caller } from '../keys/access.ts';
import { HOUR_MS, KEEP_HOURS } from '../keys/usage.ts';
import { parseSince } from '../config/units.ts';
import type { ApiNode } from './ports.ts';
import type { RequestUrl } from './request-url.ts';

/** `since` as ms since the epoch (config/units.ts parseSince: the forms every endpoint takes); throws a 400 naming them. */
export function parseUsageSince(text: string | null, nowMs: number): number {
  if (text === null || text.trim() === '') return nowMs - 24 * HOUR_MS;
  const r = parseSince(text, nowMs);
  if ('problem' in r) throw errors.invalidUsageQuery(r.problem);
  return r.ms;
}

export async function handleUsage(node: ApiNode, req: http.IncomingMessage, res: http.ServerResponse, url: RequestUrl, caller: Caller | undefined): Promise<void> {
  if (url.pathname === '/v1/usage/local') return local(node, req, res);
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    req.resume();
    throw errors.methodNotAllowed(req.method ?? 'GET', url.pathname, 'GET');
  }
  const asked = url.searchParams.get('key') ?? undefined;
  if (caller && caller.role !== 'admin' && asked !== undefined && asked !== caller.name) throw errors.insufficientScope(caller.name, caller.role, `usage of key "${asked.slice(0, 64)}"`);
  const key = caller && caller.role !== 'admin' ? caller.name : asked;
  const since = Math.max(parseUsageSince(url.searchParams.get('since'), node.now()), node.now() - KEEP_HOURS * HOUR_MS);
  const byHour = url.searchParams.get('by') === 'hour';
  const { rows, missing } = await node.meshUsage(since, key, byHour);
  sendJson(res, 200, { object: 'usage', since, ...(key !== undefined ? { key } : {}), rows, missing });
}

async function local(node: ApiNode, req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
  const body = await readBody(req, 64 * 1024, node.config.api.body_idle_timeout);
  const sender = await judgeForward(req, body, node.meshMode, node.members, () => node.metrics.authRejected.inc({ reason: 'usage' }), node.name);
  if (sender.kind !== 'forward') throw new ApiError(403, 'this node’s own usage rows are for members; clients ask GET /v1/usage', 'permission_error', 'forbidden');
  let q: { since?: unknown; key?: unknown; by_hour?: unknown } = {};
  try {
    q = JSON.parse(body.toString('utf8'));
  } catch {
    // an empty or broken ask: everything of the last day
  }
  const since = typeof q.since === 'number' ? q.since : node.now() - 24 * HOUR_MS;
  sendJson(res, 200, { rows: node.usage.rows(since, typeof q.key === 'string' ? q.key : undefined, q.by_hour === true) });
}
