/**
 * Usage (SPEC section 12):
 *
 *   GET  /v1/usage?since=…&key=…&by=hour   {"object":"usage","since":ms,"rows":[{key,model,host,[hour],requests,errors,limited,prompt_cached,prompt_uncached,completion}],"missing":[members that did not answer]}
 *   POST /v1/usage/local                   members only: this node's rows, {"rows":[…]}
 *
 * `since`: an ISO date, ms since the epoch, or a span back from now
 * (`30m`, `24h`, `7d`); default 24h; rollups are hourly and kept 30 days.
 * A user key sees its own usage only; another `key` needs an admin key.
 */
import type http from 'node:http';
import { judgeForward } from '../forward/verify.ts';
import { readBody } from '../http/body.ts';
import { ApiError, errors, sendJson } from '../http/errors.ts';
import type { Caller } from '../keys/access.ts';
import { HOUR_MS, KEEP_HOURS } from '../keys/usage.ts';
import type { ApiNode } from './ports.ts';
import type { RequestUrl } from './request-url.ts';

const SPAN = /^(\d+)(m|h|d)$/;
/** The latest time a JavaScript date holds (ECMA-262 §21.4.1.1). */
const MAX_DATE_MS = 8.64e15;
const UNIT = { m: 60_000, h: HOUR_MS, d: 24 * HOUR_MS } as const;

/** `since` as ms since the epoch; throws a 400 naming the forms it takes. */
export function parseSince(text: string | null, nowMs: number): number {
  if (text === null || text === '') return nowMs - 24 * HOUR_MS;
  const span = SPAN.exec(text);
  if (span) return nowMs - Number(span[1]) * UNIT[span[2] as keyof typeof UNIT];
  if (/^\d+$/.test(text)) {
    // A time past what a date can hold (400 digits read as Infinity) answered 200 with "since": null (issue 46).
    const ms = Number(text);
    if (!Number.isSafeInteger(ms) || ms > MAX_DATE_MS) throw errors.invalidUsageQuery(`since "${text.slice(0, 40)}${text.length > 40 ? '…' : ''}" is past any date: give ms since the epoch (such as ${nowMs}), an ISO date, or a span such as 24h or 7d`);
    return ms;
  }
  const t = Date.parse(text);
  if (Number.isNaN(t)) throw errors.invalidUsageQuery(`since "${text.slice(0, 40)}" is not a date, a time in ms, or a span such as 24h or 7d`);
  return t;
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
  const since = Math.max(parseSince(url.searchParams.get('since'), node.now()), node.now() - KEEP_HOURS * HOUR_MS);
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
