/** Alias resolution at the entry node (SPEC section 9, "Aliases"): once, before routing. */
import { resolveAlias } from '../aliases/resolve.ts';
import { errors } from '../api/errors.ts';
import type { InferenceRequest } from '../api/request.ts';
import { hostDoes } from '../route/eligibility.ts';
import type { HostView } from '../route/types.ts';
import type { ViiworkNode } from './node.ts';

/**
 * undefined when the name is a real model (or unknown: the model path answers
 * 404); else the alias and the model it resolves to for this workload. An
 * alias none of whose targets is served throws 503 Retry-After 5.
 */
export function resolveModelName(node: ViiworkNode, ir: InferenceRequest, hosts: readonly HostView[] = node.hostViews()): { alias: string; model: string } | undefined {
  const r = resolveAlias(
    node.aliases,
    ir.model,
    (model) =>
      hosts.some((h) => {
        const m = h.models.get(model);
        return m !== undefined && hostDoes(m, ir.workload);
      }),
    (model) => hosts.some((h) => h.models.has(model)),
  );
  if (r.kind === 'model') return undefined;
  if (r.kind === 'unserved') throw errors.aliasUnserved(r.alias);
  return { alias: r.alias, model: r.model };
}

/** Alive viiwork members (this node included) whose reports show alias_version ≥ v. */
export function aliasReach(node: ViiworkNode, version: number): { reached: number; members: number } {
  let reached = node.aliases.version >= version ? 1 : 0;
  let members = 1;
  for (const m of node.members.peers()) {
    if (m.state !== 'alive') continue;
    members++;
    const v = node.poller?.get(m.name)?.report.alias_version;
    if (v !== undefined && v >= version) reached++;
  }
  return { reached, members };
}
