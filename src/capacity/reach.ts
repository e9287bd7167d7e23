/**
 * How far a versioned table (aliases, keys) has spread: the members whose
 * reports show the version, read from their last capacity reports.
 */
import type { MemberInfo } from '../mesh/members.ts';
import type { CapacityPoller } from './poller.ts';

/** Alive viiwork members (this node included, at `own`) whose reports show alias_version (or `field`) ≥ `version`, of how many. */
export function versionReach(
  version: number,
  own: number,
  peers: readonly MemberInfo[],
  poller: Pick<CapacityPoller, 'get'> | undefined,
  field: 'alias_version' | 'key_version' = 'alias_version',
): { reached: number; members: number } {
  let reached = own >= version ? 1 : 0;
  let members = 1;
  for (const m of peers) {
    if (m.state !== 'alive') continue;
    members++;
    const v = poller?.get(m.name)?.report[field];
    if (v !== undefined && v >= version) reached++;
  }
  return { reached, members };
}
