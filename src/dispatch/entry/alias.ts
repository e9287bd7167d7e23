/** Alias resolution at the entry node (SPEC section 9, "Aliases"): once, before routing. */
import { resolveAlias, type AliasLookup } from '../../aliases/resolve.ts';
import { scopedAlias, type Caller } from '../../keys/access.ts';
import { errors } from '../../http/errors.ts';
import { hostDoes } from '../../route/eligibility.ts';
import type { HostView } from '../../route/types.ts';

/**
 * undefined when the name is a real model (or unknown: the model path answers
 * 404); else the model the alias resolves to for this workload. An alias none
 * of whose targets is served throws 503 Retry-After 5.
 */
export function resolveModelName(aliases: AliasLookup, name: string, workload: string, hosts: readonly HostView[]): string | undefined {
  const r = resolveAlias(
    aliases,
    name,
    (model) =>
      hosts.some((h) => {
        const m = h.models.get(model);
        return m !== undefined && hostDoes(m, workload);
      }),
    (model) => hosts.some((h) => h.models.has(model)),
  );
  if (r.kind === 'model') return undefined;
  if (r.kind === 'unserved') throw errors.aliasUnserved(r.alias);
  return r.model;
}

/**
 * The aliases a request may resolve through: all of them without a key; for
 * a key, only the fallbacks in its scope (a fallback outside it is never run
 * for it, nor named to it). An alias whose target is outside the scope is
 * refused with 403 naming the alias, never the target, whether the target is
 * served or not (a 503 would tell its state).
 */
export function aliasesOf(aliases: AliasLookup, caller: Pick<Caller, 'models' | 'name'> | undefined): AliasLookup {
  if (!caller) return aliases;
  return {
    get: (name) => {
      const a = aliases.get(name);
      if (!a) return undefined;
      const seen = scopedAlias(caller, name, a);
      if (!seen) throw errors.modelNotAllowed(caller.name, name);
      return seen;
    },
  };
}
