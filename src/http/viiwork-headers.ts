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
 * Tools of a request the engine was not shown (built-in tools of the
 * Responses API, Anthropic's own tools): the executor's answer names them,
 * and the entry node passes the header on.
 */
export const RES_OMITTED_TOOLS = 'x-viiwork-omitted-tools';
/**
 * A member's slot cache taken for this run (SPEC 13, "Moving a cache"): the
 * executor names what became of the move (`<outcome> <tokens> <bytes|-> <ms|-> <member>`),
 * and the entry node records it in its own decision feed and passes it on.
 */
export const RES_MOVED = 'x-viiwork-moved';
/**
 * On a forward's answer, between nodes: the engine slot the executor's
 * choice took (SPEC 9.6, "Slot choice"). The entry's record of its forwards
 * puts the prompt there, not in the slot its price named; not relayed.
 */
export const RES_SLOT = 'x-viiwork-slot';
/** X-Viiwork-* headers an executor sets that an entry node relays as they are. */
export const RES_PASSED_ON: ReadonlySet<string> = new Set([RES_OMITTED_TOOLS, RES_MOVED]);

/**
 * On a receiving node's own refusal of a forward: `full`, `workload`, `auth`
 * or `engine`; `waited` when a forward that was allowed to wait for a slot
 * there (its `wait` claim, queue/forward-claims.ts) got none in that time or
 * gave its place to one that ranks higher; `evicts` when its slot here
 * would destroy a live conversation's cache that the entry (its `evict`
 * claim) priced as free. The entry node retries only
 * marked refusals; every other status is the answer.
 */
export const RES_REFUSED = 'x-viiwork-refused';

export type RefusalMarker = 'full' | 'workload' | 'auth' | 'engine' | 'memory' | 'waited' | 'evicts' | 'draining';

export function refusalMarker(value: string | string[] | undefined): RefusalMarker | undefined {
  const v = Array.isArray(value) ? value[0] : value;
  return v === 'full' || v === 'workload' || v === 'auth' || v === 'engine' || v === 'memory' || v === 'waited' || v === 'evicts' || v === 'draining' ? v : undefined;
}

/**
 * The engine's own count of prompt tokens it served from its cache (SPEC
 * section 9, step 6): a response header when the executor knows it before
 * its headers go out (whole answers), else an HTTP trailer (streams).
 */
export const RES_CACHED_TOKENS = 'x-viiwork-cached-tokens';

/** A cached-token header or trailer value: a non-negative integer, else undefined. */
export function cachedTokensValue(value: string | string[] | undefined): number | undefined {
  const v = Array.isArray(value) ? value[0] : value;
  if (v === undefined || !/^\d{1,12}$/.test(v.trim())) return undefined;
  return Number(v.trim());
}
