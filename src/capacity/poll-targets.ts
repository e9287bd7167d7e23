/**
 * Whom the poller asks: every alive member with an API in the background,
 * and, before a request is refused, the members whose reports are too old to
 * refuse on (capacity/fresh.ts).
 */
import type { MemberTable } from '../mesh/members.ts';
import { membersToRefresh } from './fresh.ts';
import type { CapacityPoller } from './poller.ts';

/** The poller asks every alive member with an API, and forgets the reports of those dead or gone. */
export function pollMembers(members: MemberTable, poller: CapacityPoller | undefined): void {
  if (!poller) return;
  poller.setTargets(members.peers().filter((m) => m.state === 'alive' && m.api).map((m) => ({ name: m.name, api: m.api! })));
  for (const m of members.list()) if ((m.state === 'dead' || m.state === 'left') && !m.self) poller.forget(m.name);
}

/** Poll the members a refusal would be decided on, when their reports are stale; false when none needed it. */
export async function refreshStale(
  poller: CapacityPoller | undefined,
  members: Pick<MemberTable, 'peers'>,
  now: () => number,
  staleAfterMs: number,
  pin: string | undefined,
): Promise<boolean> {
  if (!poller) return false;
  // A poll that failed counts as recent too: a flood of refusals asks each member at most once per staleAfterMs.
  const last = (name: string) => Math.max(poller.get(name)?.polledAt ?? -Infinity, poller.lastPolled(name) ?? -Infinity);
  const names = membersToRefresh(members.peers(), (name) => (last(name) === -Infinity ? undefined : last(name)), now(), staleAfterMs, pin);
  if (names.length === 0) return false;
  await poller.pollNow(names);
  return true;
}
