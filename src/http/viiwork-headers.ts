/**
 * The `X-Viiwork-*` response headers (SPEC section 4), named once. Request
 * headers of a forward live in security/headers.ts.
 */

/** The executor: the node that ran the request. */
export const RES_NODE = 'x-viiwork-node';
/** The entry node: the node the client called. */
export const RES_ORIGIN = 'x-viiwork-origin';
/** Why the request ran where it did. */
export const RES_ROUTE = 'x-viiwork-route';
/** Milliseconds the request waited in the entry node's queue. */
export const RES_QUEUED_MS = 'x-viiwork-queued-ms';
/** The alias the client named, and the model it resolved to. */
export const RES_ALIAS = 'x-viiwork-alias';
export const RES_MODEL = 'x-viiwork-model';
/**
 * On a receiving node's own refusal of a forward: `full`, `workload`, `auth`
 * or `engine`. The entry node retries only marked refusals; every other
 * status is the answer.
 */
export const RES_REFUSED = 'x-viiwork-refused';

export type RefusalMarker = 'full' | 'workload' | 'auth' | 'engine' | 'memory';

export function refusalMarker(value: string | string[] | undefined): RefusalMarker | undefined {
  const v = Array.isArray(value) ? value[0] : value;
  return v === 'full' || v === 'workload' || v === 'auth' || v === 'engine' || v === 'memory' ? v : undefined;
}
