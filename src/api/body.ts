/**
 * A request's body as every endpoint that takes one reads it: within
 * api.max_body, api.body_idle_timeout and api.body_timeout, at most
 * api.max_open_bodies at once per client address (members' forwards not
 * counted), and with its Content-Encoding undone. Nothing here holds a slot
 * or a queue place: those are taken after the body is whole.
 */
import type http from 'node:http';
import { readBody } from '../http/body.ts';
import { decodeBody } from '../http/encoding.ts';
import { ApiError, errors } from '../http/errors.ts';
import { judgeForward } from '../forward/verify.ts';
import type { OpenBodies } from '../http/open-bodies.ts';
import type { MemberTable } from '../mesh/members.ts';
import { classifyForwardHeaders } from '../security/headers.ts';
import type { Config } from '../config/schema.ts';
import type { ApiNode } from './ports.ts';

export interface BodyPorts {
  readonly config: Config;
  readonly openBodies: OpenBodies;
  readonly members: MemberTable;
}

/** `::ffff:10.0.0.5` and `10.0.0.5` are one client. */
export function clientAddress(req: http.IncomingMessage): string {
  const ip = req.socket.remoteAddress ?? '';
  return ip.startsWith('::ffff:') ? ip.slice(7) : ip;
}

/**
 * A request that claims to be a member's forward and comes from an alive
 * member's address: an entry node forwards many bodies at once, and its
 * headers are verified once the body is here (a false claim is 401 then).
 */
function fromMember(req: http.IncomingMessage, address: string, members: MemberTable): boolean {
  if (classifyForwardHeaders(req.headers) === 'none') return false;
  return members.peers().some((m) => m.state === 'alive' && m.addr === address);
}

export async function readRequestBody(node: BodyPorts, req: http.IncomingMessage, limit = node.config.api.max_body): Promise<Buffer> {
  const api = node.config.api;
  const address = clientAddress(req);
  const counted = !fromMember(req, address, node.members);
  if (counted && !node.openBodies.enter(address)) throw errors.tooManyBodies(node.openBodies.perAddress);
  let raw: Buffer;
  try {
    raw = await readBody(req, limit, api.body_idle_timeout, api.body_timeout);
  } finally {
    if (counted) node.openBodies.leave(address);
  }
  // Most bodies carry no Content-Encoding: no decoding step (and no extra turn) for them.
  return req.headers['content-encoding'] === undefined ? raw : decodeBody(req, raw, limit);
}

/**
 * The body (and its member) of a POST only members may make (limit reports, the key table): any other method 405, a sender whose
 * forward headers do not verify 401, a client without them 403 with `forbidden` as the message.
 */
export async function readMemberPost(node: ApiNode, req: http.IncomingMessage, path: string, limit: number, reason: string, forbidden: string): Promise<{ body: Buffer; from: string }> {
  if (req.method !== 'POST') {
    req.resume();
    throw errors.methodNotAllowed(req.method ?? 'GET', path, 'POST');
  }
  const body = await readBody(req, limit, node.config.api.body_idle_timeout);
  const sender = await judgeForward(req, body, node.meshMode, node.members, () => node.metrics.authRejected.inc({ reason }), node.name);
  if (sender.kind !== 'forward') throw new ApiError(403, forbidden, 'permission_error', 'forbidden');
  return { body, from: sender.from };
}
