/**
 * `POST /v1/limits` (members only): an entry node's reports of its keys'
 * totals to their owner, answered with each key's mesh-wide view (SPEC
 * section 12; keys/limiter.ts). The body is
 * `{"reports":[{key, totals:{rpm,tpm,day,dayOf,concurrent}, demand}]}`; the
 * answer `{"views":{key:{totals, entries}}}`. A client gets 403.
 */
import type http from 'node:http';
import { errors, sendJson } from '../http/errors.ts';
import { readMemberPost } from './body.ts';
import { keyNameProblem } from '../config/key-spec.ts';
import type { Report } from '../keys/limiter.ts';
import type { ApiNode } from './ports.ts';

export const LIMITS_PATH = '/v1/limits';
const MAX_REPORTS = 4096;

const num = (x: unknown): number | undefined => (typeof x === 'number' && Number.isFinite(x) && x >= 0 ? x : undefined);
/** Token totals may be below zero: a node that settles forwards other entries admitted counts only the differences. */
const signedNum = (x: unknown): number | undefined => (typeof x === 'number' && Number.isFinite(x) ? x : undefined);

/** Reports from untrusted JSON; malformed ones are left out. */
export function parseReports(doc: unknown): Report[] {
  const list = (doc as { reports?: unknown } | null)?.reports;
  if (!Array.isArray(list)) return [];
  const out: Report[] = [];
  for (const r of list.slice(0, MAX_REPORTS)) {
    const t = (r as { totals?: Record<string, unknown> } | null)?.totals;
    const key = (r as { key?: unknown } | null)?.key;
    if (keyNameProblem(key) && key !== 'local' && key !== 'anonymous') continue;
    const totals = t && { rpm: num(t.rpm), tpm: signedNum(t.tpm), day: signedNum(t.day), dayOf: num(t.dayOf), concurrent: num(t.concurrent) };
    if (!totals || Object.values(totals).some((v) => v === undefined)) continue;
    out.push({ key: key as string, totals: totals as Report['totals'], demand: (r as { demand?: unknown }).demand === true });
  }
  return out;
}

export async function handleLimits(node: ApiNode, req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
  const { body, from } = await readMemberPost(node, req, LIMITS_PATH, 1 << 20, 'limits', 'limit reports are for members of this mesh only');
  let doc: unknown;
  try {
    doc = JSON.parse(body.toString('utf8'));
  } catch (err) {
    throw errors.malformedJson((err as Error).message);
  }
  sendJson(res, 200, { views: node.limiter.receive(from, parseReports(doc)) });
}
