/**
 * `POST /v1/slot-cache/save` and `POST /v1/slot-cache/take` (members only):
 * a cache move's calls (SPEC section 13, files/cache-move.ts). `save`: the
 * holder saves the slot whose prompt ends at a chain link and offers its
 * file at `GET /v1/files/{sha256}`; `take`: a draining member asks this node
 * to pull one of its conversations into a free slot. A client gets 403, a
 * forged or stale signature 401.
 */
import type http from 'node:http';
import { sendJson } from '../http/errors.ts';
import { MOVE_SAVE_PATH, MOVE_TAKE_PATH } from '../files/cache-move.ts';
import { readMemberPost } from './body.ts';
import type { ApiNode } from './ports.ts';

export { MOVE_SAVE_PATH, MOVE_TAKE_PATH };

export async function handleCacheMove(node: ApiNode, req: http.IncomingMessage, res: http.ServerResponse, pathname: string): Promise<void> {
  const { body, from } = await readMemberPost(node, req, pathname, 64 * 1024, 'slot-cache', 'slot caches move between members of this mesh only');
  const a = pathname === MOVE_SAVE_PATH ? await node.moves.save(from, body) : await node.moves.take(from, body);
  if (!res.destroyed) sendJson(res, a.status, a.doc);
}
