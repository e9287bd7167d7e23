/**
 * POST /v1/models/{id}/load and POST /v1/models/{id}/unload (SPEC section 11):
 * a member's ask (signed like a forward in a secured mesh), or an operator
 * with a client key or on this machine. A load answers at once: 200 loaded,
 * 202 loading (the same load for every ask), 503 marked
 * `X-Viiwork-Refused: memory` when it cannot fit even after unloading every
 * idle on-demand model. Body (optional JSON): {"reason": "...", "detail": "..."}.
 */
import type http from 'node:http';
import { judgeForward } from '../forward/verify.ts';
import { readRequestBody } from './body.ts';
import { errors, sendJson } from '../http/errors.ts';
import type { ApiNode } from './ports.ts';
import type { LoadReason } from '../lifecycle/lifecycle.ts';
import { bytesText } from '../lifecycle/lifecycle.ts';
import type { RequestUrl } from './request-url.ts';

const LOAD = /^\/v1\/models\/(.+)\/(load|unload)$/;

/** Is this path a lifecycle endpoint? Returns the model id and the action. */
export function lifecyclePath(pathname: string): { model: string; action: 'load' | 'unload' } | undefined {
  const m = LOAD.exec(pathname);
  if (!m) return undefined;
  let model: string;
  try {
    model = decodeURIComponent(m[1]);
  } catch {
    return undefined;
  }
  return { model, action: m[2] as 'load' | 'unload' };
}

/** `?host=NAME`: that member does it; `?host=*`: load where placement picks, unload everywhere it is loaded. */
async function relay(node: ApiNode, res: http.ServerResponse, model: string, action: 'load' | 'unload', host: string, detail: string): Promise<void> {
  if (host === '*' && action === 'load') {
    const placed = await node.placeModel(model, detail);
    if (!placed.host) return sendJson(res, 503, { error: { message: `no member can load "${model}": ${placed.why}`, type: 'server_error', code: 'insufficient_memory' } }, { 'retry-after': '5' });
    return sendJson(res, 202, { model, node: placed.host, state: 'loading', why: placed.why });
  }
  if (host === '*') {
    const holders = node.hostViews().filter((h) => (h.fresh || h.local) && h.models.get(model)?.targets?.some((t) => t.state === 'loaded' && t.onDemand));
    const results = await Promise.all(holders.map(async (h) => ({ node: h.name, ...(await node.askMember(h.name, model, 'unload', detail)) })));
    return sendJson(res, 200, { model, results: results.map((r) => ({ node: r.node, status: r.status, ...(r.body as object) })) });
  }
  const r = await node.askMember(host, model, action, detail);
  sendJson(res, r.status, r.body);
}

/** A caller on this machine: what may load, unload or drain without keys. */
export const isLoopback = (ip: string | undefined) => !!ip && (ip === '::1' || ip.startsWith('127.') || ip.startsWith('::ffff:127.'));

export async function handleLifecycle(node: ApiNode, req: http.IncomingMessage, res: http.ServerResponse, model: string, action: 'load' | 'unload', url: RequestUrl): Promise<void> {
  if (req.method !== 'POST') {
    req.resume();
    throw errors.methodNotAllowed(req.method ?? 'GET', `/v1/models/{id}/${action}`, 'POST');
  }
  const body = await readRequestBody(node, req, 64 * 1024);
  const sender = await judgeForward(req, body, node.meshMode, node.members, () => node.metrics.authRejected.inc({ reason: 'lifecycle' }), node.name);
  // A client key was checked by the server already when keys are configured; without keys only this machine may.
  if (sender.kind === 'client' && !node.keys.enabled && !isLoopback(req.socket.remoteAddress)) throw errors.forbiddenLifecycle();
  let asked: { reason?: unknown; detail?: unknown } = {};
  if (body.length) {
    try {
      asked = JSON.parse(body.toString('utf8'));
    } catch {
      throw errors.malformedJson('expected {"reason": ..., "detail": ...} or no body');
    }
  }
  const who = sender.kind === 'forward' ? `asked by ${sender.from}` : 'asked by an operator';
  const detail = `${typeof asked.detail === 'string' ? asked.detail.slice(0, 200) : 'no detail'}; ${who}`;
  // An operator may name another member (?host=NAME, relayed signed) or every member (?host=*): the CLI's --host.
  const host = sender.kind === 'client' ? url.searchParams.get('host') : null;
  if (host !== null && host !== node.name) return relay(node, res, model, action, host, detail);
  if (action === 'load') {
    const reason: LoadReason = asked.reason === 'scale' || asked.reason === 'request' ? asked.reason : sender.kind === 'forward' ? 'request' : 'operator';
    const a = node.loadModel(model, reason, detail);
    switch (a.kind) {
      case 'unknown':
        throw errors.unknownModel(model.slice(0, 200));
      case 'refused':
        throw errors.loadNoRoom(model, `it needs ${bytesText(a.need)}; ${bytesText(a.free)} of ${bytesText(a.budget)} free and ${bytesText(a.freeable)} held by idle on-demand models`);
      case 'unloading':
        throw errors.modelUnloading(model);
      case 'loaded':
        return sendJson(res, 200, { model, node: node.name, state: 'loaded' });
      case 'loading':
        return sendJson(res, 202, { model, node: node.name, state: 'loading' });
    }
  }
  const u = node.unloadModel(model, detail);
  switch (u.kind) {
    case 'unknown':
      throw errors.unknownModel(model.slice(0, 200));
    case 'busy':
      throw errors.modelBusy(model);
    case 'always':
      throw errors.modelAlways(model);
    default:
      return sendJson(res, 200, { model, node: node.name, state: u.kind });
  }
}
