/**
 * Load and unload asks to a member (SPEC section 11): `POST
 * /v1/models/{id}/load|unload`, one signed member call (member-call.ts),
 * answered at once (the load itself goes on behind it). On-demand loading
 * reads the answer as a LoadAsk; an operator's relayed ask gets the
 * member's own status and JSON.
 */
import { lifecycleReply, unknownMemberReply, type LifecycleReply, type LoadAsk } from '../lifecycle/answers.ts';
import type { LoadAnswer, LoadReason, UnloadAnswer } from '../lifecycle/lifecycle.ts';
import { postToMember, type MemberAnswer, type MemberLink } from './member-call.ts';

/** How long an ask to load may take to be answered (the load itself goes on behind it). */
const LOAD_ASK_MS = 5000;

function ask(link: MemberLink, host: string, model: string, action: 'load' | 'unload', doc: { reason: LoadReason; detail: string }): Promise<MemberAnswer> {
  return postToMember(link, host, `/v1/models/${encodeURIComponent(model)}/${action}`, doc, LOAD_ASK_MS);
}

/** Ask member `host` to load `model` for this node: 200 loaded, 202 loading, a refusal marked memory, or why it failed. */
export async function askMemberLoad(link: MemberLink, host: string, model: string, reason: LoadReason, detail: string): Promise<LoadAsk> {
  const r = await ask(link, host, model, 'load', { reason, detail });
  if (r.status === 200) return { kind: 'loaded' };
  if (r.status === 202) return { kind: 'loading' };
  const message = String((r.body as { error?: { message?: string } } | undefined)?.error?.message ?? r.text).slice(0, 300);
  return r.refused === 'memory' ? { kind: 'refused', detail: message } : { kind: 'failed', detail: `${r.status || 'no answer'}: ${message}` };
}

/** An operator's load or unload relayed to member `host`: its status and JSON, or 502 member_unreachable when it does not answer. */
export async function relayLifecycleAsk(link: MemberLink, host: string, model: string, action: 'load' | 'unload', detail: string): Promise<LifecycleReply> {
  const r = await ask(link, host, model, action, { reason: 'operator', detail });
  return { status: r.status || 502, body: r.body ?? { error: { message: r.text, type: 'server_error', code: 'member_unreachable' } } };
}

/** An operator's load or unload of `model` on `host`: answered here for this node, relayed to a known member, refused for a name nobody knows. */
export function askLifecycle(
  o: {
    link: MemberLink & { readonly self: string };
    known(host: string): boolean;
    load(model: string, detail: string): LoadAnswer;
    unload(model: string, detail: string): UnloadAnswer;
  },
  host: string,
  model: string,
  action: 'load' | 'unload',
  detail: string,
): Promise<LifecycleReply> {
  const self = o.link.self;
  if (host === self) return Promise.resolve(lifecycleReply(self, model, action === 'load' ? o.load(model, detail) : o.unload(model, detail)));
  if (!o.known(host)) return Promise.resolve(unknownMemberReply(host));
  return relayLifecycleAsk(o.link, host, model, action, detail);
}
