/**
 * The node's side of the mesh, made once its API listens: the membership
 * (memberlist, discovery, rejoin), the connections to members' APIs that
 * leave from the advertise address, and the poller of members' capacity
 * reports.
 */
import { Agent } from 'undici';
import { CapacityPoller, type PeerReport } from '../capacity/poller.ts';
import { Membership } from '../mesh/membership.ts';
import type { MemberTable } from '../mesh/members.ts';
import type { AliasTable } from '../aliases/table.ts';
import { roleOf } from '../config/reload.ts';
import type { Config } from '../config/schema.ts';
import type { Keyring } from '../keys/access.ts';
import type { Log } from '../log.ts';
import type { MeshMode } from '../security/secret.ts';

export interface MeshSide {
  membership: Membership;
  /** Connections to other nodes' APIs (forwards, asks, file fetches), leaving from the advertise address. */
  peerAgent: Agent;
  /** Not started: the caller sets its targets first. */
  poller: CapacityPoller;
}

/** The node's parts its mesh side reads (ViiworkNode has them all). */
export interface MeshParts {
  /** Read when used: a reload may turn a node into a gateway (its role) and back. */
  readonly config: Config;
  readonly name: string;
  readonly version: string;
  readonly apiAddress: { readonly port: number };
  readonly meshMode: MeshMode;
  readonly members: MemberTable;
  readonly aliases: AliasTable;
  readonly keys: Keyring;
  readonly log: Log;
  readonly now: () => number;
}

/** What the node does when the mesh tells it something. */
export interface MeshHooks {
  /** The member table changed. */
  onMembers(): void;
  /** Unrecoverable (another live node has our name). */
  onFatal(message: string): void;
  /** Does this node route to the member (capacity/interest.ts)? */
  routed(name: string, r: PeerReport | undefined): boolean;
  /** A report came in from member `name`. */
  onReport(name: string, r: PeerReport): void;
}

export async function startMeshSide(n: MeshParts, hooks: MeshHooks): Promise<MeshSide> {
  const config = n.config;
  const m = await Membership.start({
    config,
    name: n.name,
    version: n.version,
    apiPort: () => n.apiAddress.port,
    role: () => roleOf(n.config),
    mode: n.meshMode,
    members: n.members,
    aliases: n.aliases,
    keys: n.keys.table,
    log: n.log,
    onMembers: () => hooks.onMembers(),
    onFatal: (message) => hooks.onFatal(message),
  });
  const peerAgent = new Agent({
    keepAliveTimeout: 30_000,
    // A forward's answer may take as long as a generation does.
    headersTimeout: 15 * 60_000,
    bodyTimeout: 15 * 60_000,
    connect: { timeout: 2000 },
    localAddress: m.advertise,
  });
  const poller = new CapacityPoller({
    intervalMs: config.mesh.capacity_poll,
    backgroundMs: config.mesh.capacity_background,
    routed: (name, r) => hooks.routed(name, r),
    localAddress: m.advertise,
    now: n.now,
    log: (msg) => n.log.info(msg),
    onReport: (name, r) => hooks.onReport(name, r),
  });
  return { membership: m, peerAgent, poller };
}
