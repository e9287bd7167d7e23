/**
 * The `evict` claim (security/claims.ts) of a forward: the expected tokens
 * of re-prefill (route/slots.ts expectedLoss) the entry priced for the slot
 * it expects the executor to take. Entries read members' slots from a
 * digest up to a poll old, and several entries read the same one: without
 * this, each sends a new conversation to the slot that digest shows empty,
 * and the executor evicts a live conversation to run the second. With it,
 * the executor sends such a forward back (`X-Viiwork-Refused: evicts`) and
 * its entry prices that host's idle slots as live until its next report.
 *
 * Absent: the entry did not price slots there, or the forward cannot go
 * back (pinned, or no retry left); it then runs as before.
 *
 * The `slot` claim goes with it: the index of the slot the entry priced. The
 * executor takes that slot when it is idle and costs no more there than its
 * own choice (route/slots.ts chooseSlot), so the cached tokens the entry
 * predicted are the ones the engine reuses, whatever changed since the poll.
 */

/** The claim's value: whole tokens. */
export const evictClaim = (tokens: number | undefined): string | undefined => (tokens === undefined || !(tokens >= 0) ? undefined : String(Math.round(tokens)));

/** The tokens a claim names; undefined for a missing or malformed one (the forward then runs as before). */
export function evictOfClaim(value: string | undefined): number | undefined {
  return value !== undefined && /^\d{1,12}$/.test(value) ? Number(value) : undefined;
}

/** The `slot` claim's value: the slot's index. */
export const slotClaim = (slot: number | undefined): string | undefined => (slot === undefined || !Number.isInteger(slot) || slot < 0 ? undefined : String(slot));

/** The slot a claim names; undefined for a missing or malformed one (the executor then chooses alone). */
export function slotOfClaim(value: string | undefined): number | undefined {
  return value !== undefined && /^\d{1,6}$/.test(value) ? Number(value) : undefined;
}
