/**
 * An inference endpoint, the HTTP half: read the body within its bound,
 * judge the forward headers, parse what routing needs, and hand the request
 * to the dispatcher (src/dispatch/), which owns everything after that.
 */
import type http from 'node:http';
import type { Endpoint } from '../workloads/workloads.ts';
import { judgeForward } from '../forward/verify.ts';
import { readRequestBody } from './body.ts';
import { GoneFlag } from '../http/gone.ts';
import { errors } from '../http/errors.ts';
import { askedPriority, parseInference } from './request.ts';
import { bandOfClaim } from '../queue/forward-claims.ts';
import { allowsModel, effectivePriority, type Caller } from '../keys/access.ts';
import { admissionTokens, heldOutput } from '../keys/limits.ts';
import { GENERATION_WORKLOADS } from '../workloads/workloads.ts';
import type { ApiNode } from './ports.ts';
import type { RequestUrl } from './request-url.ts';

/** `caller`: the client's key (SPEC section 12), undefined without keys or for a forward (which names its key in its claim). */
export async function handleInference(node: ApiNode, req: http.IncomingMessage, res: http.ServerResponse, url: RequestUrl, endpoint: Endpoint, caller?: Caller): Promise<void> {
  const gone = new GoneFlag();
  res.once('close', () => {
    if (!res.writableFinished) gone.fire();
  });
  const body = await readRequestBody(node, req);
  // Read before the forward judgement strips every X-Viiwork-* header.
  const priorityHeader = req.headers['x-viiwork-priority'];
  const sender = await judgeForward(req, body, node.meshMode, node.members, (reason) => node.metrics.authRejected.inc({ reason: authReason(reason) }), node.name);
  const parsed = await parseInference(req, url, endpoint, body, node.requestLimits);
  // A forward names its key in a signed claim (SPEC section 12): the executor holds it to this node's table too, so a key
  // revoked here, or a model outside its scope, is refused even if the entry had not heard yet. A forward without the claim
  // comes from a member that admitted it without keys; the member vouches for it.
  if (sender.kind === 'forward') caller = forwardCaller(node, sender.claims.get('key'));
  // The name the client sent must be one its key may use; the model an alias runs as is checked where it resolves (dispatch/entry).
  if (caller && !allowsModel(caller, parsed.model)) throw errors.modelNotAllowed(caller.name, parsed.model);
  // A forward's band rides in a signed claim (queue/forward-claims.ts), held to the key's ceiling like a client's header.
  const asked = sender.kind === 'client' ? askedPriority(priorityHeader, body, parsed.scan) : bandOfClaim(sender.claims.get('band'));
  // The output held back for a key's limits (SPEC 12): the body's bound capped at what its model's contexts hold, or the
  // context itself when the body sets none. The entry works it out; a forward carries the entry's figure in its signed
  // `out` claim, so both settle against the same charge.
  const generation = GENERATION_WORKLOADS.includes(endpoint.workload);
  const claimed = sender.kind === 'forward' ? outOfClaim(sender.claims.get('out'), parsed.maxTokens) : undefined;
  const out = !caller || !generation ? undefined : (claimed ?? heldOutput(parsed.maxTokens, contextsOf(node, parsed.model), parsed.promptTokens));
  // A bound is replaced by the figure held (capped); an unbounded request keeps no bound and carries its hold apart.
  const held = out === undefined || out === parsed.maxTokens ? undefined : parsed.maxTokens === undefined ? { heldOutput: out } : { maxTokens: out };
  const ir = caller || asked ? Object.assign({}, parsed, { caller, priority: effectivePriority(caller, asked) }, held) : parsed;
  if (sender.kind === 'forward') {
    // A stopping node takes no new work: its slots are as good as full for the mesh.
    if (node.phase !== 'running') throw errors.forwardNoSlot();
    // Nor does a draining one (SPEC section 13), though its entry placed this on a report from before the drain. A count
    // takes no slot and is still answered.
    if (node.draining && endpoint.action !== 'count_tokens') throw errors.forwardDraining(node.name);
    return node.dispatcher.serveForward(ir, sender, res, gone);
  }
  if (!caller) return node.dispatcher.serveClient(ir, res, gone);
  // A key revoked while its request waits (the limits' round trip, the queue, a forward not yet answered) fails it
  // with 401, on whichever node the revocation reaches; an answer already under way runs to its end.
  let revoked = false;
  const unwatch = node.keys.onRevoked(caller.name, () => {
    if (res.headersSent) return;
    revoked = true;
    gone.fire();
  });
  try {
    // The key's limits, held across the mesh (SPEC section 12); count_tokens takes no slot and is not charged.
    if (endpoint.action === 'count_tokens') return await node.dispatcher.serveClient(ir, res, gone);
    const tokens = admissionTokens(ir.promptTokens, ir.heldOutput ?? ir.maxTokens, generation);
    const a = await node.limiter.admit(caller.name, caller.limits, tokens);
    if (!a.ok) {
      // A model name nobody serves is not a label (clients choose it): it counts as `unknown`.
      const known = node.aliases.get(ir.model) !== undefined || node.hostViews().some((h) => h.models.has(ir.model));
      node.recordUsage({ key: caller.name, model: known ? ir.model : 'unknown', outcome: 'limited' });
      throw errors.keyLimit(caller.name, a.limit, a.message, a.retryAfterS);
    }
    try {
      if (!revoked) await node.dispatcher.serveClient(ir, res, gone);
      if (revoked && !res.headersSent) throw errors.revokedKey(caller.name);
    } catch (err) {
      // Refused before anything was answered (an unknown model, an alias out of scope, a pin to no member, the queue's
      // 429, no healthy backend, an engine that failed before its first byte, the key revoked meanwhile): the mesh ran
      // nothing, so the key is not charged for it (docs/api.md, "Limits across the mesh").
      if (!res.headersSent) a.ticket.giveBack();
      throw err;
    } finally {
      a.ticket.release();
    }
  } finally {
    unwatch();
  }
}

/** The context lengths of every host of `model`, or of the models an alias of that name may run as (targets and fallbacks). */
function contextsOf(node: ApiNode, model: string): number[] {
  const alias = node.aliases.get(model);
  const names = alias ? [model, alias.target, ...alias.fallbacks] : [model];
  const out: number[] = [];
  for (const h of node.hostViews()) {
    for (const name of names) {
      const ctx = h.models.get(name)?.ctx;
      if (ctx !== undefined) out.push(ctx);
    }
  }
  return out;
}

/** A forward's `out` claim: the output its entry held back, never above the body's own bound; absent or malformed, undefined. */
function outOfClaim(claim: string | undefined, bound: number | undefined): number | undefined {
  const n = claim !== undefined && /^\d{1,15}$/.test(claim) ? Number(claim) : undefined;
  if (n === undefined) return bound;
  return bound === undefined || n < bound ? n : bound;
}

/** The caller a forward's `key` claim names, held to this node's key table; undefined when it names none. */
function forwardCaller(node: ApiNode, name: string | undefined): Caller | undefined {
  if (name === undefined) return undefined;
  const c = node.keys.named(name);
  if (c === 'revoked') throw errors.revokedKey(name);
  return c;
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
