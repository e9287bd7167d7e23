/**
 * A request's flow in the wait queue (SPEC section 12; queue/fair.ts): its
 * key, its band, its key's weight, and what it is expected to cost when
 * served: its prompt (uncached as far as the entry can tell) plus twice the
 * output its body bounds, or a typical answer when unbounded.
 */
import { ANONYMOUS_FLOW, serviceCost, type Flow } from '../../queue/fair.ts';
import type { RoutedRequest } from '../types.ts';

/** The output charged at admission when a request sets no bound; settled from the engine's usage afterwards. */
export const TYPICAL_OUTPUT_TOKENS = 256;

export function flowOf(rr: Pick<RoutedRequest, 'caller' | 'priority' | 'pricedTokens' | 'promptTokens' | 'maxTokens'>): Flow {
  if (!rr.caller && rr.priority !== 'batch') return ANONYMOUS_FLOW;
  return {
    key: rr.caller?.name ?? ANONYMOUS_FLOW.key,
    band: rr.priority ?? 'interactive',
    weight: rr.caller?.weight ?? 1,
    cost: serviceCost(rr.pricedTokens ?? rr.promptTokens ?? 0, rr.maxTokens ?? TYPICAL_OUTPUT_TOKENS),
  };
}
