/**
 * GET /v1/timeline/{id} (docs/api.md): a request's timeline. Asked by an
 * operator at the entry node, the executor's part of a forwarded request is
 * fetched from that member (signed like a forward) and joined; asked by a
 * member, this node's own part alone.
 */
import type http from 'node:http';
import { request } from 'undici';
import { isTimelineId, joinExecutor, type TimelineDoc } from '../dispatch/timeline.ts';
import { judgeForward } from '../forward/verify.ts';
import { addressMember, type MemberLink } from '../forward/member-call.ts';
import { ApiError, sendJson } from '../http/errors.ts';
import { EMPTY_BODY_SHA256 } from '../security/signing.ts';
import type { ApiNode } from './ports.ts';

export const TIMELINE_PREFIX = '/v1/timeline/';
/** How long the entry waits for a member's part. */
const MEMBER_WAIT_MS = 2000;

const invalid = (status: number, message: string, code: string) => new ApiError(status, message, 'invalid_request_error', code);

export async function handleTimeline(node: ApiNode, req: http.IncomingMessage, res: http.ServerResponse, pathname: string): Promise<void> {
  req.resume();
  // Forward headers are judged first: a request that carries them without a valid set learns nothing of ids.
  const sender = await judgeForward(req, Buffer.alloc(0), node.meshMode, node.members, () => {}, node.name);
  let id: string;
  try {
    id = decodeURIComponent(pathname.slice(TIMELINE_PREFIX.length));
  } catch {
    throw invalid(400, `the timeline id in ${pathname.slice(0, 120)} is not valid URL encoding: ids are <entry node>:<number>, as in the decision feed's "timeline" field`, 'invalid_timeline_id');
  }
  if (!isTimelineId(id)) throw invalid(400, `"${id.slice(0, 80)}" is not a timeline id: ids are <entry node>:<number>, as in the decision feed's "timeline" field (GET /v1/decisions)`, 'invalid_timeline_id');
  const doc = node.timelines.get(id);
  if (!doc) throw invalid(404, `no timeline ${id} on ${node.name}: a node keeps the timelines of its last 200 requests; ask the entry node named before the colon`, 'timeline_not_found');
  if (sender.kind === 'forward' || doc.executor === null || doc.executor === node.name || doc.entry !== node.name) return sendJson(res, 200, doc);
  sendJson(res, 200, joinExecutor(doc, await node.memberTimeline(doc.executor, id), doc.executor));
}

/** A member's part of timeline `id`, or why there is none. */
export async function fetchMemberTimeline(link: MemberLink, host: string, id: string): Promise<TimelineDoc | { error: string }> {
  const path = TIMELINE_PREFIX + encodeURIComponent(id);
  const to = addressMember(link, host, 'GET', path, link.signsBody ? EMPTY_BODY_SHA256 : '');
  if (!to) return { error: `member ${host} has no API address` };
  try {
    const r = await request(to.origin + path, { method: 'GET', headers: to.headers, dispatcher: link.dispatcher, headersTimeout: MEMBER_WAIT_MS, bodyTimeout: MEMBER_WAIT_MS });
    const body = (await r.body.json().catch(() => undefined)) as (TimelineDoc & { error?: { message?: string } }) | undefined;
    if (r.statusCode !== 200 || !body || !Array.isArray(body.phases)) return { error: `${host} answered ${r.statusCode}${body?.error?.message ? `: ${body.error.message}` : ''}` };
    return body;
  } catch (err) {
    return { error: `${host} did not answer: ${(err as Error).message}` };
  }
}
