/**
 * Alias resolution (SPEC section 9, step 3), pure: done once, on the entry
 * node, before candidates are gathered.
 *
 * - A real model name always wins over an alias of the same name.
 * - Otherwise, an alias resolves to the first of its target and fallbacks
 *   that some member serves for this request's workload. "Served" is not
 *   "free": a target that is served but full is chosen, and the request
 *   queues for it rather than falling back.
 * - None served: `unserved` (the caller answers 503 `alias_unserved`,
 *   Retry-After 5).
 * - Aliases do not chain: targets and fallbacks are model names only.
 * - A name that is neither an alias nor a real model is `model`: the normal
 *   model path then answers 404.
 */
import type { AliasValue } from './types.ts';

/** The part of `AliasTable` resolution reads. */
export type AliasLookup = { get(name: string): AliasValue | undefined };

export type Resolution =
  /** Not an alias (a real model, or unknown): route `name` as a model. */
  | { kind: 'model' }
  /** The alias resolved to `model`. */
  | { kind: 'alias'; alias: string; model: string }
  /** An alias none of whose targets is served for this workload now. */
  | { kind: 'unserved'; alias: string };

/**
 * @param name        the `model` of the request
 * @param servedFor   whether some alive member serves this model for the request's workload (healthy or not, free or full)
 * @param isRealModel whether `name` is a model some member serves (for any workload)
 */
export function resolveAlias(
  table: AliasLookup,
  name: string,
  servedFor: (model: string) => boolean,
  isRealModel: (model: string) => boolean,
): Resolution {
  if (isRealModel(name)) return { kind: 'model' };
  const alias = table.get(name);
  if (!alias) return { kind: 'model' };
  for (const model of [alias.target, ...alias.fallbacks]) {
    if (servedFor(model)) return { kind: 'alias', alias: name, model };
  }
  return { kind: 'unserved', alias: name };
}
