/**
 * The node's side of the mesh, made once its API listens: the membership
 * (memberlist, discovery, rejoin), the connections to members' APIs that
 * leave from the advertise address, and the poller of members' capacity
 * reports; and which members that poller asks.
 */
import { Agent } from 'undici';
import { CapacityPoller, type PeerReport } from '../capacity/poller.ts';
import type { PeerLink } from '../forward/send.ts';
import { postToMember } from '../forward/member-call.ts';
import { KEY_TABLE_PATH } from '../api/keys.ts';
import { KeySync } from '../keys/sync.ts';
import type { KeyTable } from '../keys/table.ts';
import type { MemberTable } from '../mesh/members.ts';
import { Membership, type MembershipDeps } from '../mesh/membership.ts';
import { memberHeaders } from '../security/headers.ts';
import { SIGNING_V3_SINCE, versionBefore } from '../security/signing.ts';
import type { MeshMode } from '../security/secret.ts';

export interface MeshSide {
  membership: Membership;
  /** Connections to other nodes' APIs (forwards, asks, file fetches), leaving from the advertise address. */
  peerAgent: Agent;
  /** Not started: the caller sets its targets first. */
  poller: CapacityPoller;
}

export interface PollDeps {
  /** mesh.capacity_poll and mesh.capacity_background, ms. */
  intervalMs: number;
  backgroundMs: number;
  /** Does this node route to the member (capacity/interest.ts)? */
  routed(name: string, r: PeerReport | undefined): boolean;
  now(): number;
  log(msg: string): void;
  /** A report came in from member `name`. */
  onReport(name: string, r: PeerReport): void;
}

export async function startMeshSide(membership: MembershipDeps, poll: PollDeps): Promise<MeshSide> {
  const m = await Membership.start(membership);
  const peerAgent = new Agent({
    keepAliveTimeout: 30_000,
    // A forward's answer may take as long as a generation does.
    headersTimeout: 15 * 60_000,
    bodyTimeout: 15 * 60_000,
    connect: { timeout: 2000 },
    localAddress: m.advertise,
  });
  const poller = new CapacityPoller({
    intervalMs: poll.intervalMs,
    backgroundMs: poll.backgroundMs,
    routed: (name, r) => poll.routed(name, r),
    localAddress: m.advertise,
    now: poll.now,
    log: poll.log,
    onReport: (name, r) => poll.onReport(name, r),
  });
  return { membership: m, peerAgent, poller };
}

/** The poller asks every alive member with an API, and forgets the reports of those dead or gone. */
export function pollMembers(members: MemberTable, poller: CapacityPoller | undefined): void {
  if (!poller) return;
  poller.setTargets(members.peers().filter((m) => m.state === 'alive' && m.api).map((m) => ({ name: m.name, api: m.api! })));
  for (const m of members.list()) if ((m.state === 'dead' || m.state === 'left') && !m.self) poller.forget(m.name);
}

/** How this node calls members (forward/member-call.ts): their API from the member table, signed as `self`, quiet once stale. */
export function peerLink(o: {
  self: string;
  mode: MeshMode;
  members: MemberTable;
  /** routing.stale_after, ms: a member whose last report is older has gone quiet. */
  staleAfterMs: number;
  now(): number;
  poller(): CapacityPoller | undefined;
  /** The peer agent (made once the advertise address is known). */
  agent(): Agent;
}): PeerLink {
  return {
    self: o.self,
    signsBody: o.mode.mode === 'secured',
    apiOf: (host) => o.members.get(host)?.api,
    responsive: (host) => {
      const report = o.poller()?.get(host);
      return o.members.get(host)?.state === 'alive' && report !== undefined && o.now() - report.polledAt <= o.staleAfterMs;
    },
    // A member older than claims (signature v3) gets the forward without them: it would refuse the signature.
    sign: (method, pathWithQuery, bodySha256, to, claims) =>
      memberHeaders(o.mode, o.self, method, pathWithQuery, bodySha256, to, claims !== undefined && !versionBefore(o.members.get(to)?.version, SIGNING_V3_SINCE) ? claims : undefined),
    get dispatcher() {
      return o.agent();
    },
  };
}

/** The key table's anti-entropy (keys/sync.ts): a member's whole table, pulled over a signed member call. */
export function keySyncOver(table: KeyTable, link: PeerLink, now: () => number): KeySync {
  return new KeySync({
    table,
    now,
    pull: async (host) => {
      const r = await postToMember(link, host, KEY_TABLE_PATH, {}, 5000);
      const entries = r.status === 200 ? (r.body as { entries?: unknown } | undefined)?.entries : undefined;
      return Array.isArray(entries) ? entries : undefined;
    },
  });
}
