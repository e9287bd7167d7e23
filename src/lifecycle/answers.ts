/**
 * A lifecycle answer (lifecycle.ts's LoadAnswer, UnloadAnswer) as each of
 * its askers reads it: an operator's relayed load or unload gets the status
 * and JSON the endpoint would give (api/lifecycle.ts), and on-demand loading
 * (dispatch/entry/load.ts) gets a LoadAsk. Pure.
 */
import { bytesText, type LoadAnswer, type UnloadAnswer } from './lifecycle.ts';

/** What an ask to load came to, local or remote (dispatch/entry/load.ts reads it as AskResult). */
export type LoadAsk = { kind: 'loading' | 'loaded' } | { kind: 'refused'; detail: string } | { kind: 'failed'; detail: string };

/** An endpoint's answer: its status and JSON body. */
export interface LifecycleReply {
  status: number;
  body: unknown;
}

/** A local lifecycle answer as the endpoint would give it (status and JSON). */
export function lifecycleReply(node: string, model: string, a: LoadAnswer | UnloadAnswer): LifecycleReply {
  const err = (status: number, code: string, message: string) => ({ status, body: { error: { message, type: status === 404 ? 'invalid_request_error' : 'server_error', code } } });
  switch (a.kind) {
    case 'loaded':
    case 'unloaded':
      return { status: 200, body: { model, node, state: a.kind } };
    case 'loading':
    case 'unloading':
      return { status: a.kind === 'loading' ? 202 : 200, body: { model, node, state: a.kind } };
    case 'refused':
      return err(503, 'insufficient_memory', `${node} cannot fit "${model}": it needs ${bytesText(a.need)}, ${bytesText(a.free)} free and ${bytesText(a.freeable)} idle`);
    case 'busy':
      return err(409, 'model_busy', `"${model}" has requests running or queued on ${node}`);
    case 'always':
      return err(409, 'model_always', `"${model}" is load: always on ${node}`);
    case 'unknown':
      return err(404, 'model_not_found', `${node} has no entry for "${model}"`);
  }
}

/** An operator named a host the member table does not know. */
export function unknownMemberReply(host: string): LifecycleReply {
  return { status: 404, body: { error: { message: `no member named "${host.slice(0, 63)}" (viiwork status lists them)`, type: 'invalid_request_error', code: 'unknown_host' } } };
}

/** This node's own answer to a load ask. */
export function localLoadAsk(a: LoadAnswer): LoadAsk {
  switch (a.kind) {
    case 'loaded':
    case 'loading':
      return { kind: a.kind };
    case 'refused':
      return { kind: 'refused', detail: `needs ${a.need} bytes, ${a.free} free` };
    default:
      return { kind: 'failed', detail: a.kind };
  }
}
