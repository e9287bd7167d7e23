/**
 * POST /v1/drain (SPEC section 13): the node stops taking new work, lets what
 * it holds finish within node.drain_timeout, leaves the mesh and exits. An
 * admin key's call where keys are on; without keys, only from this machine
 * (a member, or anyone who reaches the port, must not take a node out).
 * Answers 202 at once; the drain goes on behind it. A second call joins the first.
 */
import type http from 'node:http';
import { errors, sendJson } from '../http/errors.ts';
import type { ApiNode } from './ports.ts';
import { isLoopback } from './lifecycle.ts';

export const DRAIN_PATH = '/v1/drain';

export function handleDrain(node: ApiNode, req: http.IncomingMessage, res: http.ServerResponse): void {
  req.resume();
  if (req.method !== 'POST') throw errors.methodNotAllowed(req.method ?? 'GET', DRAIN_PATH, 'POST');
  // With keys on, the server has already required an admin key (keys/access.ts needOf).
  if (!node.keys.enabled && !isLoopback(req.socket.remoteAddress)) throw errors.forbiddenDrain();
  const already = node.draining;
  void node.drain(`asked through ${DRAIN_PATH} from ${req.socket.remoteAddress ?? 'an unknown address'}`);
  sendJson(res, 202, { node: node.name, draining: true, already, timeout_ms: node.config.node.drain_timeout });
}
