/**
 * What a node does with a run's usage (SPEC section 12): the key's hourly
 * rollups and metrics, the settlement of its limits from the engine's own
 * counts, and the mesh-wide usage merged from every member's rows.
 */
import type { RoutedRequest } from '../dispatch/types.ts';
import type { ServedUsage } from '../dispatch/ports.ts';
import { postToMember, type MemberLink } from '../forward/member-call.ts';
import type { Keyring } from '../keys/access.ts';
import { Limiter } from '../keys/limiter.ts';
import { LIMITS_PATH } from '../api/limits.ts';
import { admissionTokens } from '../keys/limits.ts';
import { mergeRows, parseRows, type ServedRecord, type UsageBook, type UsageRow } from '../keys/usage.ts';
import { isPeer, type MemberInfo, type MemberTable } from '../mesh/members.ts';
import type { Metrics } from '../metrics/metrics.ts';
import { GENERATION_WORKLOADS } from '../workloads/workloads.ts';

export interface UsageSide {
  readonly keys: Keyring;
  readonly limiter: Limiter;
  readonly usage: UsageBook;
  readonly metrics: Metrics;
}

/**
 * The members a key's owner is chosen among (keys/limiter.ts ownerOf), and whose count divides a cut-off node's share:
 * this node and its viiwork peers, alive or suspect. A suspect member is still asked (it usually answers; when it
 * does not, entries are cut off and keep to their shares): were it dropped at the first missed probe, the nodes that
 * suspect it and those that do not would choose different owners for its keys, and each owner would let its entries
 * spend the whole limit.
 */
export function limitOwners(self: string, peers: readonly Pick<MemberInfo, 'name' | 'state' | 'role'>[]): string[] {
  return [self, ...peers.filter(isPeer).map((m) => m.name)];
}

/** The key limits' half on this node (keys/limiter.ts): owners among this node and its peers, reports over signed member calls. */
export function limiterOver(self: string, members: MemberTable, link: MemberLink, now: () => number, stateDir: string, log: (msg: string) => void): Limiter {
  return new Limiter({
    self,
    now,
    alive: () => limitOwners(self, members.peers()),
    send: async (host, reports) => {
      const r = await postToMember(link, host, LIMITS_PATH, { reports }, 1000);
      return r.status === 200 ? (r.body as { views?: Record<string, never> }).views : undefined;
    },
    stateDir,
    log,
  });
}

/** One request's usage here: the hourly rollups and the per-key metrics. */
export function recordUsage(n: UsageSide, r: ServedRecord): void {
  n.usage.record(r);
  n.metrics.keyRequests.inc({ key: r.key, model: r.model, outcome: r.outcome });
  if (r.promptCached) n.metrics.keyTokens.inc({ key: r.key, model: r.model, kind: 'prompt_cached' }, r.promptCached);
  if (r.promptUncached) n.metrics.keyTokens.inc({ key: r.key, model: r.model, kind: 'prompt_uncached' }, r.promptUncached);
  if (r.completion) n.metrics.keyTokens.inc({ key: r.key, model: r.model, kind: 'completion' }, r.completion);
}

/** A local run ended with the engine's answer: its usage recorded, and the key's tokens settled against what admission held back. */
export function settleServed(n: UsageSide, rr: RoutedRequest, used: ServedUsage): void {
  const c = rr.caller;
  if (c || n.keys.enabled) {
    const prompt = used.promptTokens ?? 0;
    const cached = Math.min(prompt, used.cachedTokens ?? 0);
    // A client that left is no engine error; an engine that broke off is.
    const ok = used.cutShort === 'client' || (used.cutShort === undefined && used.status < 400);
    recordUsage(n, { key: c?.name ?? 'anonymous', model: rr.model, outcome: ok ? 'ok' : 'error', promptCached: cached, promptUncached: prompt - cached, completion: used.completionTokens ?? 0 });
  }
  if (!c || Object.keys(c.limits).length === 0) return;
  const held = admissionTokens(rr.promptTokens, rr.heldOutput ?? rr.maxTokens, GENERATION_WORKLOADS.includes(rr.workload));
  // A refusal (the engine's own 4xx, or this executor's about the request) that reports no usage ran nothing: no tokens.
  if (used.promptTokens === undefined && used.completionTokens === undefined) {
    if (used.status >= 400) n.limiter.settle(c.name, -held, used.startedAt);
    return;
  }
  n.limiter.settle(c.name, (used.promptTokens ?? rr.promptTokens ?? 0) + (used.completionTokens ?? 0) - held, used.startedAt);
}

/** Every alive member's usage rows (this node's included), merged: the mesh-wide /v1/usage. */
export async function meshUsage(n: UsageSide, link: MemberLink, members: MemberTable, sinceMs: number, key: string | undefined, byHour: boolean): Promise<{ rows: UsageRow[]; missing: string[] }> {
  const peers = members.peers().filter((m) => m.state === 'alive' && m.api);
  const missing: string[] = [];
  const theirs = await Promise.all(
    peers.map(async (m) => {
      const r = await postToMember(link, m.name, '/v1/usage/local', { since: sinceMs, key, by_hour: byHour }, 5000);
      if (r.status !== 200) missing.push(m.name);
      return r.status === 200 ? parseRows((r.body as { rows?: unknown }).rows) : [];
    }),
  );
  return { rows: mergeRows([...n.usage.rows(sinceMs, key, byHour), ...theirs.flat()]), missing: missing.sort() };
}
