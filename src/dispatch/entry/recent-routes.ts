/**
 * The entry node's record of its own recent routes (SPEC section 9, step 6):
 * per (host, model), the prefix chains of the last requests it sent there,
 * with when. Pricing reads it as a host's cache until that host's next
 * digest (which then knows those requests), so a burst of related requests
 * meets on one host instead of scattering before the next poll.
 *
 * Bounded: ROUTES_PER_HOST chains per (host, model), each keeping its first
 * HEAD_LINKS and last TAIL_LINKS links (the shared system prompt and the
 * conversation so far: what another request can share), none older than
 * ROUTE_MAX_AGE_MS.
 */
import type { PrefixChain } from '../../prompt/held.ts';
import type { RouteMemory } from '../../route/warmth.ts';
import { HostRecords } from './host-records.ts';

export const ROUTES_PER_HOST = 32;
export const HEAD_LINKS = 32;
export const TAIL_LINKS = 224;
export const ROUTE_MAX_AGE_MS = 10 * 60_000;

interface Route {
  readonly at: number;
  /** When the request ended there (undefined: still running, or never told). */
  endedAt?: number;
  held: Map<string, number>;
  /** The hash of its prompt's last link. */
  last: string;
}

/** How a forward ended, as the forward book hears it: it ran there, or its member sent it back (or its engine failed). */
export type RouteEnd = 'served' | 'refused';

/** One recorded route: tell it how the request ended. */
export interface RouteHandle {
  /**
   * `served`: the record keeps it, and learns when it ended. `refused` (sent back: full, waited out, or its slot would
   * evict a live conversation; or its engine failed): the host holds nothing of it, so the record forgets it; kept, it
   * would price that host warm for this very prompt and pull the retry straight back to a cold slot there.
   */
  end(how: RouteEnd): void;
}

export class RecentRoutes implements RouteMemory {
  readonly #records = new HostRecords<Route>(ROUTES_PER_HOST, ROUTE_MAX_AGE_MS);

  constructor(private readonly now: () => number = Date.now) {}

  /** A request with this chain was just placed on `host`. */
  record(host: string, model: string, chain: PrefixChain): RouteHandle | undefined {
    if (chain.length === 0) return undefined;
    const now = this.now();
    const kept = chain.length <= HEAD_LINKS + TAIL_LINKS ? chain : [...chain.slice(0, HEAD_LINKS), ...chain.slice(-TAIL_LINKS)];
    const held = new Map<string, number>();
    for (const l of kept) held.set(l.hash, l.tokens);
    const route: Route = { at: now, held, last: chain[chain.length - 1].hash };
    const forget = this.#records.add(host, model, route, now);
    return {
      end: (how) => {
        if (how === 'refused') return forget();
        route.endedAt ??= this.now();
      },
    };
  }

  held(host: string, model: string, chain: PrefixChain, since: number, slots: number, continued = false): number {
    const list = this.#records.of(host, model);
    if (list.length === 0) return 0;
    const now = this.now();
    let best = 0;
    for (let i = list.length - 1, seen = 0; i >= 0 && seen < slots; i--, seen++) {
      const r = list[i];
      if (now - r.at > ROUTE_MAX_AGE_MS) break;
      // The digest polled at `since` knows this request, but if it ended after that poll the digest shows its slot
      // busy with it, and what only busy slots hold does not count with a free slot: this node knows better.
      if (r.at < since && !(r.endedAt !== undefined && r.endedAt >= since)) continue;
      for (let k = chain.length - 1; k >= 0 && chain[k].tokens > best; k--) {
        if (continued ? chain[k].hash === r.last : r.held.has(chain[k].hash)) {
          best = chain[k].tokens;
          break;
        }
      }
    }
    return best;
  }
}
