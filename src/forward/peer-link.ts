/**
 * How this node calls members (member-call.ts, send.ts): their API from the
 * member table, requests signed as this node, and a member counted as gone
 * quiet once it is not alive or its last report is stale (a forward sent on a
 * stale report: once stale_after has passed since it was sent, with no report).
 */
import type { Agent } from 'undici';
import type { MemberTable } from '../mesh/members.ts';
import { memberHeaders } from '../security/headers.ts';
import type { MeshMode } from '../security/secret.ts';
import { SIGNING_V3_SINCE, versionBefore } from '../security/signing.ts';
import type { PeerLink } from './send.ts';

export function peerLink(o: {
  self: string;
  mode: MeshMode;
  members: MemberTable;
  /** routing.stale_after, ms: a member whose last report is older has gone quiet. */
  staleAfterMs: number;
  now(): number;
  /** When member `host`'s last capacity report came (undefined: none yet). */
  polledAt(host: string): number | undefined;
  /** The peer agent (made once the advertise address is known). */
  agent(): Agent;
}): PeerLink {
  return {
    self: o.self,
    signsBody: o.mode.mode === 'secured',
    apiOf: (host) => o.members.get(host)?.api,
    quietSince: (host) => {
      const fresh = (since: number) => {
        const polledAt = o.polledAt(host);
        return o.now() - Math.max(polledAt ?? -Infinity, since) <= o.staleAfterMs;
      };
      // Sent on a stale report: its own start stands in for the poll, so it has stale_after to answer or be heard from.
      const since = fresh(-Infinity) ? -Infinity : o.now();
      return () => o.members.get(host)?.state !== 'alive' || !fresh(since);
    },
    // A member older than claims (signature v3) gets the forward without them: it would refuse the signature.
    sign: (method, pathWithQuery, bodySha256, to, claims) =>
      memberHeaders(o.mode, o.self, method, pathWithQuery, bodySha256, to, claims !== undefined && !versionBefore(o.members.get(to)?.version, SIGNING_V3_SINCE) ? claims : undefined),
    get dispatcher() {
      return o.agent();
    },
  };
}
