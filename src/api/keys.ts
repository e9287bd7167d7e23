/**
 * The key endpoints (SPEC section 12), admin only once the mesh has keys:
 *
 *   GET    /v1/keys          {"object":"list","version":N,"keys":[{name,role,models,priority,weight,limits,version,writer,at}]}
 *   POST   /v1/keys          {name, role?, models?, priority?, weight?, limits?} (or sha256 to register a secret made elsewhere)
 *                            -> 201 {name, key, ...} with the secret, this once
 *   PATCH  /v1/keys/{name}   the fields to change (a limit set to null is removed)
 *   DELETE /v1/keys/{name}   revoke: a tombstone spread over the mesh
 *
 * Before any key exists the writes are accepted only from this machine (how
 * the first key is made: `viiwork keys add` on a node), and the first key
 * must be an admin key, or nobody could manage the others. No answer holds
 * a hash; only the POST that made a secret shows it.
 */
import crypto from 'node:crypto';
import type http from 'node:http';
import { checkKeyFields, type KeySpec } from '../config/key-spec.ts';
import { readBody } from '../http/body.ts';
import { errors, sendJson } from '../http/errors.ts';
import { readMemberPost } from './body.ts';
import { sha256Hex } from '../keys/access.ts';
import type { KeyView } from '../keys/table.ts';
import { KeyError, type KeyEntry } from '../keys/types.ts';
import { isLocalAddress } from './aliases.ts';
import type { ApiNode } from './ports.ts';
import type { RequestUrl } from './request-url.ts';

const PREFIX = '/v1/keys';

/** A key as the API shows it: never its hash. */
export function keyItem(k: KeyView): Record<string, unknown> {
  return { name: k.name, role: k.role, models: k.models, priority: k.priority, weight: k.weight, limits: k.limits, version: k.version, writer: k.writer, at: k.at };
}

/** A new secret: 32 random bytes, base64url, with a prefix that says what it is. */
export const newSecret = (): string => `vk-${crypto.randomBytes(32).toString('base64url')}`;

async function jsonBody(req: http.IncomingMessage, limit: number, idleMs: number): Promise<unknown> {
  const raw = await readBody(req, limit, idleMs);
  try {
    return JSON.parse(raw.toString('utf8'));
  } catch (err) {
    throw errors.malformedJson((err as Error).message);
  }
}

function asApiError(err: unknown, name: string): unknown {
  if (!(err instanceof KeyError)) return err;
  if (err.code === 'not_found') return errors.unknownKey(name);
  if (err.code === 'exists') return errors.keyExists(err.message);
  return errors.invalidKey(err.message);
}

export async function handleKeys(node: ApiNode, req: http.IncomingMessage, res: http.ServerResponse, url: RequestUrl): Promise<void> {
  const method = req.method ?? 'GET';
  const rest = url.pathname === PREFIX ? '' : url.pathname.slice(PREFIX.length + 1);
  const table = node.keys.table;
  if (rest.includes('/')) throw errors.notFound(url.pathname);
  if (rest === '' && method !== 'GET' && method !== 'HEAD' && method !== 'POST') throw errors.methodNotAllowed(method, url.pathname, 'GET, POST');
  if (rest !== '' && method !== 'PATCH' && method !== 'DELETE') throw errors.methodNotAllowed(method, url.pathname, 'PATCH, DELETE');
  if (method === 'GET' || method === 'HEAD') return sendJson(res, 200, { object: 'list', version: table.version, keys: table.list().map(keyItem) });
  // Without keys the API is open: only this machine may make the first one (as alias writes, SPEC section 6).
  if (!node.keys.enabled && !isLocalAddress(req.socket.remoteAddress)) {
    req.resume();
    throw errors.forbiddenRemoteWrite('key');
  }
  let name = '';
  try {
    name = decodeURIComponent(rest);
  } catch {
    throw errors.invalidKey(`the key name in ${url.pathname} is not valid URL encoding`);
  }
  const limit = 64 * 1024;
  const idle = node.config.api.body_idle_timeout;
  try {
    if (method === 'POST') {
      const body = await jsonBody(req, limit, idle);
      const made = typeof body === 'object' && body !== null && !Array.isArray(body) && !('sha256' in body) ? newSecret() : undefined;
      const { value, problems } = checkKeyFields(made ? { ...(body as object), sha256: sha256Hex(made) } : body, { withName: true, needHash: true });
      if (problems.length) throw errors.invalidKey(problems.map((p) => `${p.path || 'body'}: ${p.message}`).join('; '));
      const spec = value as KeySpec;
      if (!node.keys.enabled && spec.role !== 'admin') throw errors.invalidKey('the first key of a mesh must have role admin, or nobody could manage keys; add it with --role admin');
      const e = table.add(spec, node.name);
      return await written(node, res, 201, e, made ? { key: made } : {});
    }
    if (method === 'PATCH') {
      const body = await jsonBody(req, limit, idle);
      if (typeof body === 'object' && body !== null && 'name' in body) throw errors.invalidKey('a key cannot be renamed; add a new key and remove this one');
      return await written(node, res, 200, table.patch(name, body, node.name));
    }
    req.resume();
    return await written(node, res, 200, table.remove(name, node.name), { deleted: true });
  } catch (err) {
    throw asApiError(err, name);
  }
}

async function written(node: ApiNode, res: http.ServerResponse, status: number, e: KeyEntry, extra: Record<string, unknown> = {}): Promise<void> {
  const { reached, members } = node.keyReach(e.version);
  const shown = e.value ? keyItem({ name: e.name, ...e.value, version: e.version, writer: e.writer, at: e.at }) : { name: e.name, version: e.version, writer: e.writer, at: e.at };
  sendJson(res, status, { ...shown, ...extra, reached, members });
}

/**
 * `POST /v1/keytable` (members only): this node's whole key table,
 * tombstones included, for a member whose capacity report showed another
 * `key_digest` (keys/sync.ts). The answer is `{"digest", "entries":[…]}`,
 * entries as gossip carries them (hashes of secrets, never a secret). A
 * client gets 403.
 */
export const KEY_TABLE_PATH = '/v1/keytable';

export async function handleKeyTable(node: ApiNode, req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
  await readMemberPost(node, req, KEY_TABLE_PATH, 4096, 'keytable', 'the key table is for members of this mesh only; clients list keys with GET /v1/keys (admin)');
  const table = node.keys.table;
  sendJson(res, 200, { digest: table.digest, entries: table.snapshot() });
}
