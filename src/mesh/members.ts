/**
 * The member table the rest of the node reads: every member with its state,
 * role, gossip and API addresses, version and since when. Fed from the
 * gossip layer's view; departed members stay listed for 24 h.
 */
import { parseMeta, type Role } from './meta.ts';

export type MemberState = 'alive' | 'suspect' | 'dead' | 'left';

/** What the gossip layer knows of a member. */
export interface GossipMember {
  name: string;
  addr: string;
  port: number;
  meta: Buffer;
  state: MemberState;
}

export interface MemberInfo {
  name: string;
  state: MemberState;
  role: Role;
  /** "ip:port" */
  gossip: string;
  /** "http://ip:port", absent for foreign members. */
  api?: string;
  addr: string;
  version?: string;
  /** Clock ms of the last state change seen here. */
  since: number;
  self: boolean;
}

export const DEPARTED_KEEP_MS = 24 * 3_600_000;

/** A viiwork member other nodes work with: alive or suspect (a suspect one is still asked), never a foreign agent. */
export const isPeer = (m: Pick<MemberInfo, 'state' | 'role'>): boolean => m.role !== 'foreign' && (m.state === 'alive' || m.state === 'suspect');

/**
 * The members a key's owner is chosen among (keys/limiter.ts ownerOf), and whose count divides a cut-off node's share:
 * this node and its viiwork peers, alive or suspect. A suspect member is still asked (it usually answers; when it
 * does not, entries are cut off and keep to their shares): were it dropped at the first missed probe, the nodes that
 * suspect it and those that do not would choose different owners for its keys, and each owner would let its entries
 * spend the whole limit.
 */
export function limitOwners(self: string, peers: readonly Pick<MemberInfo, 'name' | 'state' | 'role'>[]): string[] {
  return [self, ...peers.filter(isPeer).map((m) => m.name)];
}

export class MemberTable {
  readonly #members = new Map<string, MemberInfo>();
  // Made once per change of the table, not per read: every request reads the peers (routing, the forward check).
  #list: readonly MemberInfo[] | undefined;
  #peers: readonly MemberInfo[] | undefined;

  constructor(
    readonly selfName: string,
    private readonly now: () => number = Date.now,
    private readonly onChange: (m: MemberInfo, prev: MemberInfo | undefined) => void = () => {},
  ) {}

  /** Apply the gossip layer's current view. Members it no longer lists keep their last state until they age out. */
  update(view: readonly GossipMember[]): void {
    const now = this.now();
    this.#list = this.#peers = undefined;
    for (const g of view) {
      const meta = parseMeta(g.meta);
      const prev = this.#members.get(g.name);
      const host = g.addr.includes(':') ? `[${g.addr}]` : g.addr;
      const next: MemberInfo = {
        name: g.name,
        state: g.state,
        role: meta.role,
        gossip: `${host}:${g.port}`,
        api: meta.api ? `http://${host}:${meta.api}` : undefined,
        addr: g.addr,
        version: meta.ver,
        since: prev && prev.state === g.state ? prev.since : now,
        self: g.name === this.selfName,
      };
      this.#members.set(g.name, next);
      if (!prev || prev.state !== next.state || prev.role !== next.role || prev.gossip !== next.gossip) this.onChange(next, prev);
    }
    for (const [name, m] of this.#members) {
      if ((m.state === 'dead' || m.state === 'left') && now - m.since > DEPARTED_KEEP_MS) this.#members.delete(name);
    }
    // Again at the end: an onChange above may have read the table half updated.
    this.#list = this.#peers = undefined;
  }

  get(name: string): MemberInfo | undefined {
    return this.#members.get(name);
  }

  /** Every member, sorted by name. */
  list(): readonly MemberInfo[] {
    return (this.#list ??= [...this.#members.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)));
  }

  /** Alive or suspect viiwork members other than this node: the ones polled and listed in /v1/models. */
  peers(): readonly MemberInfo[] {
    return (this.#peers ??= this.list().filter((m) => !m.self && isPeer(m)));
  }

  /** Alive viiwork members, this node counted as one. */
  aliveCount(): number {
    return 1 + this.peers().filter((m) => m.state === 'alive').length;
  }

  /** The one peer whose advertise address is `ip` (its connections leave from it, SPEC section 1); undefined: none, or several. */
  peerAt(ip: string): string | undefined {
    let found: string | undefined;
    for (const m of this.peers()) {
      if (m.addr !== ip) continue;
      if (found !== undefined) return undefined;
      found = m.name;
    }
    return found;
  }

  counts(): Record<MemberState, number> {
    const c: Record<MemberState, number> = { alive: 0, suspect: 0, dead: 0, left: 0 };
    for (const m of this.#members.values()) c[m.state]++;
    return c;
  }
}
