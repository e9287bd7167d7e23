/**
 * What a forward's claims say of its stream's survival (SPEC 13): `survive=1`, its entry continues a cut stream (so
 * the executor ends its connection on a cut, rather than an error event the entry would have to pass on); `carried=N`,
 * the request continues a cut answer whose N tokens its prompt carries (charged to the key as output, once).
 */
import type { ForwardClaims } from '../security/claims.ts';
import type { StreamSurvival } from './types.ts';

/** The claims of a request's survival, for its forward. */
export function survivalClaims(s: StreamSurvival | undefined): { survive?: string; carried?: string } {
  if (!s) return {};
  return { ...(s.handBack ? { survive: '1' } : {}), ...(s.carried ? { carried: String(s.carried) } : {}) };
}

/** The survival a forward's claims describe; undefined when they say nothing of it. */
export function survivalOfClaims(claims: ForwardClaims): StreamSurvival | undefined {
  const handBack = claims.get('survive') === '1';
  const c = claims.get('carried');
  const carried = c !== undefined && /^\d{1,9}$/.test(c) ? Number(c) : undefined;
  if (!handBack && carried === undefined) return undefined;
  return { handBack, ...(carried !== undefined ? { carried } : {}) };
}
