/**
 * Memberlist: a wire-compatible TypeScript HashiCorp memberlist member.
 *
 * ```ts
 * const ml = await Memberlist.create({ name: 'a', bindAddr: '127.0.1.1', port: 7946, label: '', keys: [key] }, delegate);
 * ml.on('join' | 'update' | 'leave', (m: Member) => …);
 * ml.on('conflict', (other: Member, info: { duringJoin: boolean }) => …);
 * await ml.join(['127.0.1.2:7946']);   // → { joined, errors }
 * ml.members(); ml.localMember(); ml.numAlive();
 * await ml.updateMeta(); await ml.sendBestEffort(name, buf); await ml.sendReliable(name, buf);
 * await ml.leave(5000); await ml.shutdown();
 * ```
 *
 * 'join' fires when a node turns alive from unknown, dead or left, 'leave'
 * when it turns dead or left, 'update' when its metadata changes and (unlike
 * Go, which has no event for it) when it turns suspect or is alive again
 * after suspicion: every change of state that members() shows has an event.
 * 'conflict' fires when a live node claims our name from another address
 * (duringJoin is true when we saw it while joining, i.e. we are the
 * newcomer). members() lists every node the protocol still tracks, with
 * its state: dead and left nodes are kept for gossipToTheDeadMs (30 s).
 */
import { EventEmitter } from 'node:events';
import { Clock, realClock } from './clock.ts';
import { Keyring } from './keyring.ts';
import { validateLabel } from './codec/label.ts';
import { NodeStateType } from './codec/messages.ts';
import { Delegate, Logger, MemberlistState, MemberlistStats, NodeState, StateConfig, VSN, ipToString } from './state.ts';
import { NetTransport, Transport } from './transport.ts';

export type { Delegate, Logger, MemberlistStats } from './state.ts';
export { VSN } from './state.ts';

export interface MemberlistConfig {
  /** Unique node name in the cluster. */
  name: string;
  /** Address to bind UDP and TCP and to advertise; must be concrete (not 0.0.0.0). */
  bindAddr: string;
  /** Port for both UDP and TCP (7946 by convention; 0 picks one). */
  port: number;
  /** Label header and AES-GCM additional data; '' for none (needed to talk to Serf 0.9.4). */
  label: string;
  /** AES keys (16/24/32 bytes); the first is primary. Unset or empty: plaintext. */
  keys?: Buffer[];
  /** Failure detection probe interval. Default 1000. */
  probeIntervalMs?: number;
  /** Wait for a direct ack before indirect probes. Default 500. */
  probeTimeoutMs?: number;
  /** Members asked for indirect probes. Default 3. */
  indirectChecks?: number;
  /** Gossip interval. Default 200. */
  gossipIntervalMs?: number;
  /** Members gossiped to per interval. Default 3. */
  gossipNodes?: number;
  /** How long dead members keep being gossiped to and listed. Default 30000. */
  gossipToTheDeadMs?: number;
  /** Suspicion timeout multiplier. Default 4. */
  suspicionMult?: number;
  /** Upper bound of the suspicion timeout as a multiple of its minimum. Default 6. */
  suspicionMaxTimeoutMult?: number;
  /** Retransmits per broadcast = mult * ceil(log10(n+1)). Default 4. */
  retransmitMult?: number;
  /** Full state sync interval (0 disables). Default 30000. */
  pushPullIntervalMs?: number;
  /** After this long dead, a name may be taken by a new address. Default 30000 (memberlist: never). */
  deadNodeReclaimMs?: number;
  /** Lifeguard awareness max multiplier. Default 8. */
  awarenessMaxMultiplier?: number;
  /** Stream timeout. Default 10000. */
  tcpTimeoutMs?: number;
  /** Largest UDP payload we build. Default 1400. */
  udpBufferSize?: number;
  /** LZW-compress messages. Default true. */
  enableCompression?: boolean;
  /** Skip TCP fallback pings. Default false. */
  disableTcpPings?: boolean;
  logger?: Logger;
  /**
   * Spacing of repeated operator warnings (level 'warn', with a `kind` field:
   * label, encryption, mode, oversize, malformed) about one peer host.
   * Default 60000.
   */
  warnIntervalMs?: number;
  /**
   * The delegate protocol range we advertise in every alive message's Vsn
   * (memberlist's DelegateProtocolMin/Max/Version). Every live member's
   * current version must fall inside everyone's range, or push-pulls are
   * refused at both ends. Default { min: 2, max: 5, cur: 5 }: Serf's range,
   * which viiwork keeps so Serf agents can join. A plain Go memberlist
   * application (DefaultLANConfig) advertises 0/0/0: configure
   * { min: 0, max: 0, cur: 0 } to form a cluster with one.
   */
  delegateProtocol?: { min: number; max: number; cur: number };
  /** Tests: replace the UDP/TCP transport and the clock. */
  transport?: Transport;
  clock?: Clock;
}

export type MemberState = 'alive' | 'suspect' | 'dead' | 'left';

export interface Member {
  name: string;
  addr: string;
  port: number;
  meta: Buffer;
  state: MemberState;
  incarnation: number;
  /** ms timestamp (of the configured clock) of the last state change. */
  stateChangedAt: number;
  /** [pmin, pmax, pcur, dmin, dmax, dcur] */
  vsn: number[];
}

const stateName: Record<NodeStateType, MemberState> = {
  [NodeStateType.alive]: 'alive',
  [NodeStateType.suspect]: 'suspect',
  [NodeStateType.dead]: 'dead',
  [NodeStateType.left]: 'left',
};

export function toMember(n: NodeState): Member {
  return {
    name: n.name,
    addr: ipToString(n.addr),
    port: n.port,
    meta: n.meta,
    state: stateName[n.state],
    incarnation: n.incarnation,
    stateChangedAt: n.stateChange,
    vsn: [...n.vsn],
  };
}

export interface MemberlistEvents {
  join: [Member];
  update: [Member];
  leave: [Member];
  conflict: [Member, { duringJoin: boolean }];
}

/** VSN with the delegate range replaced (validated: bytes, min <= cur <= max). */
function delegateVsn(d: MemberlistConfig['delegateProtocol']): number[] {
  if (!d) return [...VSN];
  const ok = (n: number) => Number.isInteger(n) && n >= 0 && n <= 255;
  if (![d.min, d.max, d.cur].every(ok) || d.min > d.cur || d.cur > d.max) {
    throw new Error(`delegateProtocol must be bytes with min <= cur <= max, got ${JSON.stringify(d)}`);
  }
  return [VSN[0], VSN[1], VSN[2], d.min, d.max, d.cur];
}

export class Memberlist extends EventEmitter<MemberlistEvents> {
  private shut = false;

  private constructor(
    readonly state: MemberlistState,
    private readonly transport: Transport,
  ) {
    super();
  }

  static async create(cfg: MemberlistConfig, delegate: Delegate = {}): Promise<Memberlist> {
    validateLabel(cfg.label);
    const keyring = cfg.keys && cfg.keys.length ? new Keyring(cfg.keys) : null;
    const sc: StateConfig = {
      name: cfg.name,
      label: cfg.label,
      keyring,
      probeIntervalMs: cfg.probeIntervalMs ?? 1000,
      probeTimeoutMs: cfg.probeTimeoutMs ?? 500,
      indirectChecks: cfg.indirectChecks ?? 3,
      gossipIntervalMs: cfg.gossipIntervalMs ?? 200,
      gossipNodes: cfg.gossipNodes ?? 3,
      gossipToTheDeadMs: cfg.gossipToTheDeadMs ?? 30_000,
      suspicionMult: cfg.suspicionMult ?? 4,
      suspicionMaxTimeoutMult: cfg.suspicionMaxTimeoutMult ?? 6,
      retransmitMult: cfg.retransmitMult ?? 4,
      pushPullIntervalMs: cfg.pushPullIntervalMs ?? 30_000,
      deadNodeReclaimMs: cfg.deadNodeReclaimMs ?? 30_000,
      awarenessMaxMultiplier: cfg.awarenessMaxMultiplier ?? 8,
      tcpTimeoutMs: cfg.tcpTimeoutMs ?? 10_000,
      udpBufferSize: cfg.udpBufferSize ?? 1400,
      enableCompression: cfg.enableCompression ?? true,
      disableTcpPings: cfg.disableTcpPings ?? false,
      logger: cfg.logger ?? (() => {}),
      warnIntervalMs: cfg.warnIntervalMs ?? 60_000,
      vsn: delegateVsn(cfg.delegateProtocol),
    };
    const transport = cfg.transport ?? (await NetTransport.create(cfg.bindAddr, cfg.port));
    let ml!: Memberlist;
    const state = new MemberlistState(sc, transport, cfg.clock ?? realClock, delegate, {
      join: (n) => ml.emit('join', toMember(n)),
      update: (n) => ml.emit('update', toMember(n)),
      leave: (n) => ml.emit('leave', toMember(n)),
      conflict: (_existing, other, duringJoin) => ml.emit('conflict', toMember(other), { duringJoin }),
    });
    ml = new Memberlist(state, transport);
    try {
      state.start();
    } catch (e) {
      await transport.shutdown();
      throw e;
    }
    return ml;
  }

  /** Joins through each "ip:port" with a push-pull; resolves with how many answered. */
  join(addrs: string[]): Promise<{ joined: number; errors: Error[] }> {
    return this.state.join(addrs);
  }

  /** Every node still tracked (alive, suspect, and dead/left for gossipToTheDeadMs), us included. */
  members(): Member[] {
    return this.state.allNodes().map(toMember);
  }

  localMember(): Member {
    return toMember(this.state.localNode());
  }

  /** Alive or suspect nodes, us included. */
  numAlive(): number {
    return this.state.numAlive();
  }

  /** Counters of received and refused traffic (a snapshot). */
  stats(): MemberlistStats {
    return { ...this.state.stats };
  }

  /** Lifeguard health score (0 = healthy). */
  healthScore(): number {
    return this.state.healthScore();
  }

  /** Re-reads nodeMeta() from the delegate and gossips it. */
  updateMeta(timeoutMs = 5000): Promise<void> {
    return this.state.updateMeta(timeoutMs);
  }

  sendBestEffort(node: string, msg: Buffer): Promise<void> {
    return this.state.sendBestEffort(node, msg);
  }

  sendReliable(node: string, msg: Buffer): Promise<void> {
    return this.state.sendReliable(node, msg);
  }

  /** Gossips our departure (others mark us 'left') and waits up to timeoutMs for it to go out. */
  leave(timeoutMs = 5000): Promise<void> {
    return this.state.leave(timeoutMs);
  }

  /** Stops all timers and closes the sockets, without telling anyone. */
  async shutdown(): Promise<void> {
    if (this.shut) return;
    this.shut = true;
    this.state.stop();
    await this.transport.shutdown();
  }
}
