/**
 * The mesh-wide /v1/usage: every alive member's rows, asked over one signed
 * member call each, merged with this node's. A member that does not answer
 * is named, not waited for again.
 */
import { mergeRows, parseRows, type UsageRow } from '../keys/usage.ts';
import type { MemberTable } from '../mesh/members.ts';
import { postToMember, type MemberLink } from './member-call.ts';

export async function meshUsage(
  link: MemberLink,
  members: Pick<MemberTable, 'peers'>,
  ownRows: (sinceMs: number, key: string | undefined, byHour: boolean) => UsageRow[],
  sinceMs: number,
  key: string | undefined,
  byHour: boolean,
): Promise<{ rows: UsageRow[]; missing: string[] }> {
  const peers = members.peers().filter((m) => m.state === 'alive' && m.api);
  const missing: string[] = [];
  const theirs = await Promise.all(
    peers.map(async (m) => {
      const r = await postToMember(link, m.name, '/v1/usage/local', { since: sinceMs, key, by_hour: byHour }, 5000);
      if (r.status !== 200) missing.push(m.name);
      return r.status === 200 ? parseRows((r.body as { rows?: unknown }).rows) : [];
    }),
  );
  return { rows: mergeRows([...ownRows(sinceMs, key, byHour), ...theirs.flat()]), missing: missing.sort() };
}
