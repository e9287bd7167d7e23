/** Alias resolution at the entry node (SPEC section 9, "Aliases"): once, before routing. */
import type { InferenceRequest } from '../api/request.ts';
import type { ViiworkNode } from './node.ts';

/** undefined when the name is a real model or no alias; else the model the alias resolves to (or throws 503). */
export function resolveModelName(node: ViiworkNode, ir: InferenceRequest): { alias: string; model: string } | undefined {
  void node;
  void ir;
  return undefined;
}
