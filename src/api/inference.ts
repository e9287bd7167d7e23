/**
 * An inference endpoint, the HTTP half: read the body within its bound,
 * judge the forward headers, parse what routing needs, and hand the request
 * to the dispatcher (src/dispatch/), which owns everything after that.
 */
import type http from 'node:http';
import type { Endpoint } from '../workloads/workloads.ts';
import { judgeForward } from '../forward/verify.ts';
import { readBody } from '../http/body.ts';
import { errors } from '../http/errors.ts';
import { parseInference } from './request.ts';
import type { ApiNode } from './ports.ts';

export async function handleInference(node: ApiNode, req: http.IncomingMessage, res: http.ServerResponse, url: URL, endpoint: Endpoint): Promise<void> {
  const abort = new AbortController();
  res.on('close', () => {
    if (!res.writableFinished) abort.abort();
  });
  const body = await readBody(req, node.config.api.max_body, node.config.api.body_idle_timeout);
  const sender = await judgeForward(req, body, node.meshMode, node.members, (reason) => node.metrics.authRejected.inc({ reason: authReason(reason) }), node.name);
  const ir = await parseInference(req, url, endpoint, body, node.requestLimits);
  if (sender.kind === 'forward') {
    // A stopping node takes no new work: its slots are as good as full for the mesh.
    if (node.phase !== 'running') throw errors.forwardNoSlot();
    return node.dispatcher.serveForward(ir, sender.from, res, abort.signal);
  }
  return node.dispatcher.serveClient(ir, res, abort.signal);
}

const AUTH_REASONS: [RegExp, string][] = [
  [/replay|nonce seen/, 'replay'],
  [/timestamp/, 'timestamp'],
  [/signature/, 'signature'],
  [/incomplete/, 'incomplete'],
  [/malformed|repeated|hash/, 'malformed'],
  [/member/, 'not-member'],
];

/** A bounded label for an authentication failure: its kind, never the values a client sent. */
export function authReason(reason: string): string {
  for (const [re, label] of AUTH_REASONS) if (re.test(reason)) return label;
  return 'other';
}
