/**
 * Which members to poll at once before a request is refused (SPEC section 7,
 * the first-request poll; issue 28): a refusal (404, 400, 503 before any
 * waiting) decided from a report older than routing.stale_after may be
 * wrong, since members polled in the background are heard from only every
 * capacity_background. A pin asks only about the pinned member.
 */
export interface MemberPollState {
  readonly name: string;
  readonly state: string;
  /** Its API address (a member without one cannot be polled). */
  readonly api?: string;
}

/**
 * The alive members whose last poll (answered or not) is older than
 * `staleAfterMs`, or who were never polled; for a pin, the pinned one only.
 * A member whose poll failed a moment ago is not asked again until it is as
 * old, so a flood of refused requests polls each member at most once per
 * `staleAfterMs`.
 */
export function membersToRefresh(
  peers: readonly MemberPollState[],
  lastPolled: (name: string) => number | undefined,
  now: number,
  staleAfterMs: number,
  pin?: string,
): string[] {
  const out: string[] = [];
  for (const m of peers) {
    if (m.state !== 'alive' || !m.api || (pin !== undefined && m.name !== pin)) continue;
    const at = lastPolled(m.name);
    if (at === undefined || now - at > staleAfterMs) out.push(m.name);
  }
  return out;
}
