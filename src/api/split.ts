/**
 * The lend API of a model bigger than one host (SPEC section 11), members
 * only (signed like a forward in a secured mesh; from a member's address in
 * an open mesh), as the slot-cache paths are:
 *
 * - `POST /v1/split/lend` `{"model": M, "bytes": N}`: lend N bytes for M;
 *   200 `{"lend_id", "bytes", "lease_ms"}` once its ggml-rpc-server listens
 *   on this node's loopback; 403 `lend_memory_off` when the operator has not
 *   set `node.lend_memory: true`; 503 marked `X-Viiwork-Refused: memory`
 *   when the free budget does not hold N.
 * - `POST /v1/split/renew` `{"lend_id"}`: the lease goes on; 404 when the
 *   lend is gone (its process ended, its lease ran out).
 * - `POST /v1/split/release` `{"lend_id"}`: the memory comes back.
 *
 * A client gets 403, a forged or stale signature 401.
 */
import type http from 'node:http';
import { ApiError, sendJson } from '../http/errors.ts';
import { RES_REFUSED } from '../http/viiwork-headers.ts';
import { readMemberPost } from './body.ts';
import type { ApiNode } from './ports.ts';

import { SPLIT_LEND_PATH, SPLIT_RELEASE_PATH, SPLIT_RENEW_PATH } from '../split/runner.ts';

export { SPLIT_LEND_PATH, SPLIT_RELEASE_PATH, SPLIT_RENEW_PATH };

export function isSplitPath(pathname: string): boolean {
  return pathname === SPLIT_LEND_PATH || pathname === SPLIT_RENEW_PATH || pathname === SPLIT_RELEASE_PATH;
}

const bad = (message: string) => new ApiError(400, message, 'invalid_request_error', 'invalid_lend');

function parse(body: Buffer): Record<string, unknown> {
  let doc: unknown;
  try {
    doc = JSON.parse(body.toString('utf8'));
  } catch {
    throw bad('expected a JSON object such as {"model": "m", "bytes": 1073741824} or {"lend_id": "..."}');
  }
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) throw bad('expected a JSON object');
  return doc as Record<string, unknown>;
}

function lendId(doc: Record<string, unknown>): string {
  const id = doc.lend_id;
  if (typeof id !== 'string' || !/^[A-Za-z0-9_-]{1,64}$/.test(id)) throw bad('expected "lend_id": the id a lend answered with');
  return id;
}

export async function handleSplit(node: ApiNode, req: http.IncomingMessage, res: http.ServerResponse, pathname: string): Promise<void> {
  const { body, from } = await readMemberPost(node, req, pathname, 16 * 1024, 'split', 'memory is lent to members of this mesh only');
  const doc = parse(body);
  if (pathname === SPLIT_LEND_PATH) {
    const model = doc.model;
    const bytes = doc.bytes;
    if (typeof model !== 'string' || !model || model.length > 256) throw bad('expected "model": the name of the model the memory is for');
    if (typeof bytes !== 'number' || !Number.isSafeInteger(bytes) || bytes <= 0) throw bad('expected "bytes": a positive whole number of bytes to lend');
    // A draining node takes no new work (SPEC section 13): its lends end when it leaves.
    if (node.draining) throw new ApiError(503, `${node.name} is draining: it lends no more memory; the runner asks another member`, 'server_error', 'draining', 5, { [RES_REFUSED]: 'draining' });
    const a = await node.lends.lend(from, model, bytes);
    switch (a.kind) {
      case 'off':
        throw new ApiError(403, `${node.name} does not lend memory: its operator has not set node.lend_memory: true`, 'permission_error', 'lend_memory_off', undefined, { [RES_REFUSED]: 'memory' });
      case 'no-room':
        throw new ApiError(503, `${node.name} cannot lend ${a.need} bytes: ${a.free} bytes of its budget are free; the runner asks another member`, 'server_error', 'insufficient_memory', 5, { [RES_REFUSED]: 'memory' });
      case 'failed':
        throw new ApiError(503, `${node.name} could not start ggml-rpc-server for the lend: ${a.why}`, 'server_error', 'lend_failed', 5);
      case 'lent':
        return sendJson(res, 200, { lend_id: a.id, node: node.name, bytes: a.bytes, lease_ms: a.leaseMs });
    }
  }
  const id = lendId(doc);
  if (pathname === SPLIT_RENEW_PATH) {
    if (!node.lends.renew(id, from)) throw new ApiError(404, `no lend "${id}" to ${from} here: it ended (released, its lease ran out, or its process stopped)`, 'invalid_request_error', 'lend_not_found');
    return sendJson(res, 200, { lend_id: id, renewed: true });
  }
  const released = await node.lends.release(id, from);
  sendJson(res, 200, { lend_id: id, released });
}
