/**
 * The two claims (security/claims.ts) that let the executor order forwards
 * with its own waiters (admission.ts):
 *
 * - `band`: the band the entry placed the request in (`interactive` or
 *   `batch`). The executor holds it to the key's ceiling, so a claim can
 *   only lower a request, as the client's own header can.
 * - `wait`: milliseconds the forward may wait at the executor for a slot
 *   when none is free (its entry's deadline less a margin, at most
 *   routing.forward_wait). Absent: refused at once when full, as before.
 *
 * Both are left out where they would say nothing new (no keys, no wait), so
 * a fleet without keys sends the forwards it always sent.
 */
import type { Band } from './fair.ts';

/** The band claim's value: the band, or undefined (interactive needs no claim: it is every key's default ceiling). */
export const bandClaim = (band: Band | undefined): string | undefined => (band === 'batch' ? 'batch' : undefined);

/** The band a claim asks for; undefined for a missing or unknown value (a newer sender's band is not guessed). */
export function bandOfClaim(value: string | undefined): Band | undefined {
  return value === 'batch' || value === 'interactive' ? value : undefined;
}

/** The wait claim's value: whole milliseconds, or undefined when there is nothing to wait for. */
export const waitClaim = (ms: number): string | undefined => (ms >= 1 ? String(Math.floor(ms)) : undefined);

/** How long a forward may wait here: its claim, capped by this node's own routing.forward_wait; 0 without a (well-formed) claim. */
export function waitOfClaim(value: string | undefined, maxMs: number): number {
  if (value === undefined || !/^\d{1,9}$/.test(value)) return 0;
  return Math.min(Number(value), Math.max(0, maxMs));
}
