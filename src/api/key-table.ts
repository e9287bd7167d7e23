/**
 * `POST /v1/keytable` (members only): this node's whole key table,
 * tombstones included, for a member whose capacity report showed another
 * `key_digest` (keys/sync.ts). The answer is `{"digest", "entries":[…]}`,
 * entries as gossip carries them (hashes of secrets, never a secret). A
 * client gets 403.
 */
import type http from 'node:http';
import { judgeForward } from '../forward/verify.ts';
import { readBody } from '../http/body.ts';
import { ApiError, errors, sendJson } from '../http/errors.ts';
import type { ApiNode } from './ports.ts';

export const KEY_TABLE_PATH = '/v1/keytable';

export async function handleKeyTable(node: ApiNode, req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
  if (req.method !== 'POST') {
    req.resume();
    throw errors.methodNotAllowed(req.method ?? 'GET', KEY_TABLE_PATH, 'POST');
  }
  const body = await readBody(req, 4096, node.config.api.body_idle_timeout);
  const sender = await judgeForward(req, body, node.meshMode, node.members, () => node.metrics.authRejected.inc({ reason: 'keytable' }), node.name);
  if (sender.kind !== 'forward') throw new ApiError(403, 'the key table is for members of this mesh only; clients list keys with GET /v1/keys (admin)', 'permission_error', 'forbidden');
  const table = node.keys.table;
  sendJson(res, 200, { digest: table.digest, entries: table.snapshot() });
}
