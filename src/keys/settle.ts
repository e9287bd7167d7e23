/**
 * What the end of a local run means for its key (SPEC section 12): the usage
 * row it adds, and the correction of the tokens admission held back, taken
 * from the engine's own counts. Pure; the node applies both.
 */
import { GENERATION_WORKLOADS, type Workload } from '../workloads/workloads.ts';
import type { Caller } from './access.ts';
import { admissionTokens } from './limits.ts';
import type { ServedRecord } from './usage.ts';

/** The request as its settlement reads it (dispatch/types.ts RoutedRequest). */
export interface SettledRequest {
  readonly caller?: Caller;
  readonly model: string;
  readonly workload: Workload;
  readonly promptTokens: number | undefined;
  readonly maxTokens?: number;
  readonly heldOutput?: number;
}

/** What one run on a local engine used, from the engine's own usage where it gave one. */
export interface RunUsage {
  /** The engine's answer status. */
  status: number;
  promptTokens?: number;
  cachedTokens?: number;
  completionTokens?: number;
  /**
   * The answer was cut short: the client left (`client`) or the engine broke off (`engine`) before its usage came.
   * The counts are then the node's own: the prompt as estimated, the events streamed as completion tokens.
   */
  cutShort?: 'client' | 'engine';
  /**
   * Clock ms the run took its slot: a settlement is counted in that second of the key's minute, beside its admission,
   * so the admission's estimate and its correction leave the sliding minute together (keys/window.ts).
   */
  startedAt?: number;
}

export interface Settlement {
  /** The run's usage row: kept when the caller has a key, or keys are configured at all. */
  record?: ServedRecord;
  /** Tokens to add to the key's windows (negative: handed back), counted in the second the run took its slot. */
  settle?: { key: string; tokens: number; at: number | undefined };
}

export function settlement(rr: SettledRequest, used: RunUsage, keysEnabled: boolean): Settlement {
  const out: Settlement = {};
  const c = rr.caller;
  if (c || keysEnabled) {
    const prompt = used.promptTokens ?? 0;
    const cached = Math.min(prompt, used.cachedTokens ?? 0);
    // A client that left is no engine error; an engine that broke off is.
    const ok = used.cutShort === 'client' || (used.cutShort === undefined && used.status < 400);
    out.record = { key: c?.name ?? 'anonymous', model: rr.model, outcome: ok ? 'ok' : 'error', promptCached: cached, promptUncached: prompt - cached, completion: used.completionTokens ?? 0 };
  }
  if (!c || Object.keys(c.limits).length === 0) return out;
  const held = admissionTokens(rr.promptTokens, rr.heldOutput ?? rr.maxTokens, GENERATION_WORKLOADS.includes(rr.workload));
  // A refusal (the engine's own 4xx, or this executor's about the request) that reports no usage ran nothing: no tokens.
  if (used.promptTokens === undefined && used.completionTokens === undefined) {
    if (used.status >= 400) out.settle = { key: c.name, tokens: -held, at: used.startedAt };
    return out;
  }
  out.settle = { key: c.name, tokens: (used.promptTokens ?? rr.promptTokens ?? 0) + (used.completionTokens ?? 0) - held, at: used.startedAt };
  return out;
}
