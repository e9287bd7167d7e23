/**
 * This node in the mesh: picks the advertise address, runs memberlist with
 * our metadata and the alias and key tables as user state and user messages, feeds
 * the member table and the capacity poller, and keeps discovery joining.
 */
import { decode, encodeChange, encodeTable } from '../aliases/codec.ts';
import type { AliasTable } from '../aliases/table.ts';
import type { Config } from '../config/schema.ts';
import { decodeKeys, encodeKeyChange, encodeKeyTable } from '../keys/codec.ts';
import type { KeyTable } from '../keys/table.ts';
import { debugEnabled, type Log } from '../log.ts';
import { MdnsFeeder, defaultRouteAddress } from './discovery/mdns.ts';
import type { Feeder } from './discovery/feeder.ts';
import { RejoinLoop } from './discovery/rejoin.ts';
import { SeedFeeder } from './discovery/seeds.ts';
import { TailnetFeeder, tailnetSelfAddress, tailscaledAnswers } from './discovery/tailnet.ts';
import type { Logger } from './memberlist/state.ts';
import { MemberlistThread } from './thread/memberlist-thread.ts';
import type { MemberTable } from './members.ts';
import { encodeMeta } from './meta.ts';
import { encodeUserState, userStateParts } from './user-state.ts';
import type { MeshMode } from '../security/secret.ts';

export class MeshStartError extends Error {}

export interface MembershipDeps {
  config: Config;
  name: string;
  version: string;
  apiPort: () => number;
  /** `gateway` while this node serves no models (it can change on SIGHUP). */
  role: () => 'node' | 'gateway';
  mode: MeshMode;
  members: MemberTable;
  aliases: AliasTable;
  /** The mesh-wide key table (SPEC section 12): spread like aliases; nothing of it on the wire while it is empty. */
  keys: KeyTable;
  log: Log;
  /** The member list changed (joins, state changes). */
  onMembers: () => void;
  /** Unrecoverable: another live node has our name. */
  onFatal: (message: string) => void;
}

/** The address to bind gossip to and advertise (SPEC section 5): configured, else from the network mode. */
export async function resolveAdvertise(config: Config): Promise<{ advertise: string; network: 'tailnet' | 'lan' }> {
  const { network, advertise, tailnet_socket: socket } = config.mesh;
  const useTailnet = network === 'tailnet' || (network === 'auto' && (await tailscaledAnswers(socket)));
  if (advertise) return { advertise, network: useTailnet ? 'tailnet' : 'lan' };
  if (useTailnet) {
    const ip = await tailnetSelfAddress(socket);
    if (!ip) throw new MeshStartError(`mesh.network is tailnet but tailscaled at ${socket} gave no IPv4 address; start tailscale, or set mesh.advertise`);
    return { advertise: ip, network: 'tailnet' };
  }
  const ip = defaultRouteAddress();
  if (!ip) throw new MeshStartError('no default-route interface address found for mesh.network lan; set mesh.advertise to this machine’s LAN IP');
  return { advertise: ip, network: 'lan' };
}

/**
 * memberlist's log lines as operator lines. memberlist rate-limits its
 * warnings (one per kind and peer host a minute) and names the peer in
 * `from`; everything else is a debug line.
 */
function meshLogger(deps: MembershipDeps): Logger {
  const { log } = deps;
  return (level, msg, fields) => {
    const kind = level === 'warn' ? fields?.kind : undefined;
    const from = String(fields?.from ?? '').replace(/:\d+$/, '') || 'a peer';
    if (kind === 'mode') {
      log.warn(
        deps.mode.mode === 'secured'
          ? `mesh mode mismatch: plaintext gossip from ${from}, but this node is secured (VIIWORK_MESH_SECRET); set the same secret there, or mesh.open on both`
          : `mesh mode mismatch: encrypted gossip from ${from}, but this node is open (mesh.open); give it the mesh's VIIWORK_MESH_SECRET instead`,
      );
    } else if (kind === 'encryption') {
      log.warn(`gossip from ${from} could not be decrypted: it uses another VIIWORK_MESH_SECRET (or VIIWORK_MESH_SECRET_PREV)`);
    } else if (kind === 'label') {
      log.warn(`mesh.label differs: ${msg.replace(/^label mismatch:?\s*/, '')}; set the same mesh.label on both`);
    } else if (kind) {
      log.warn(`gossip from ${from} refused: ${msg}`);
    } else log.debug(`memberlist ${level}: ${msg}`, fields);
  };
}

/** The push-pull user state: the alias table, and the key table beside it once it holds anything. */
function userState(deps: Pick<MembershipDeps, 'aliases' | 'keys'>): Buffer {
  return encodeUserState([encodeTable(deps.aliases.snapshot()), deps.keys.empty ? undefined : encodeKeyTable(deps.keys.snapshot())]);
}

export class Membership {
  #rejoin: RejoinLoop | undefined;
  #mdns: MdnsFeeder | undefined;
  #feeders: Feeder[] = [];
  #unsubscribe: (() => void) | undefined;

  private constructor(
    /** memberlist, on its own thread (src/mesh/thread/): members(), join(), updateMeta(), … */
    readonly ml: MemberlistThread,
    readonly advertise: string,
    readonly network: 'tailnet' | 'lan',
    private readonly deps: MembershipDeps,
  ) {}

  get gossipAddress(): string {
    const m = this.ml.localMember();
    return `${m.addr}:${m.port}`;
  }

  static async start(deps: MembershipDeps): Promise<Membership> {
    const { config, log } = deps;
    const { advertise, network } = await resolveAdvertise(config);
    const ml = await MemberlistThread.start({
      config: {
        name: deps.name,
        bindAddr: advertise,
        port: config.mesh.port,
        label: config.mesh.label,
        keys: deps.mode.mode === 'secured' ? deps.mode.keys : undefined,
      },
      // Read here, on the node's thread, at start and on every updateMeta() (role changes on SIGHUP).
      nodeMeta: () => encodeMeta({ api: deps.apiPort(), ver: deps.version, role: deps.role() }),
      localState: userState(deps),
      logger: meshLogger(deps),
      // Only warnings and errors reach the operator unless VIIWORK_DEBUG=1: the engine need not send the rest.
      logLevels: debugEnabled() ? ['debug', 'info', 'warn', 'error'] : ['warn', 'error'],
      notifyMsg: (buf) => {
        const d = decode(buf);
        if (d?.kind === 'change') deps.aliases.merge([d.entry]);
        const k = d ? undefined : decodeKeys(buf);
        if (k?.kind === 'change') deps.keys.merge([k.entry]);
      },
      mergeRemoteState: (buf) => {
        for (const part of userStateParts(buf)) {
          const d = decode(part);
          if (d?.kind === 'table') deps.aliases.merge(d.entries);
          const k = d ? undefined : decodeKeys(part);
          if (k?.kind === 'table') deps.keys.merge(k.entries);
        }
      },
      inline: process.env.VIIWORK_GOSSIP_INLINE === '1',
    });
    const m = new Membership(ml, advertise, network, deps);
    m.#wire();
    log.info(`gossip on ${m.gossipAddress} (${network}, ${deps.mode.mode} mesh${config.mesh.label ? `, label ${config.mesh.label}` : ''})`);
    await m.#startDiscovery();
    return m;
  }

  #wire(): void {
    const { deps, ml } = this;
    const refresh = () => {
      deps.members.update(ml.members());
      deps.onMembers();
    };
    ml.on('join', refresh);
    ml.on('update', refresh);
    ml.on('leave', refresh);
    ml.on('conflict', (other, info) => {
      const msg = `another live node is named "${deps.name}" at ${other.addr}:${other.port}; node.name must be unique in the mesh`;
      if (info.duringJoin) deps.onFatal(msg);
      else deps.log.error(msg);
    });
    ml.on('failed', (err) => deps.onFatal(`gossip stopped: ${err.message}`));
    ml.on('unhandled', (err) => deps.log.error(`unhandled rejection in the gossip thread (a bug; please report it): ${err.stack ?? err.message}`));
    deps.members.update(ml.members());
    // Every change to the alias table travels as a gossip user message; merged changes are passed on too, and stop once nothing changes.
    // The engine answers push-pulls with the table it was last given, so it gets the whole table on every change too.
    const offAliases = deps.aliases.onChange((changed) => {
      for (const e of changed) ml.queueBroadcast(`alias:${e.name}`, encodeChange(e));
      ml.setLocalState(userState(deps));
    });
    // Key changes travel the same way; a revocation reaches every member within a few gossip rounds.
    const offKeys = deps.keys.onChange((changed) => {
      for (const e of changed) ml.queueBroadcast(`key:${e.name}`, encodeKeyChange(e));
      ml.setLocalState(userState(deps));
    });
    this.#unsubscribe = () => (offAliases(), offKeys());
    // A change made while the engine started (the API already answers) is in the table, if not in gossip.
    ml.setLocalState(userState(deps));
  }

  async #startDiscovery(): Promise<void> {
    const { config, log } = this.deps;
    const say = (msg: string) => log.info(msg);
    this.#feeders.push(new SeedFeeder(config.mesh.seeds, { log: say }));
    if (this.network === 'tailnet') this.#feeders.push(new TailnetFeeder({ socketPath: config.mesh.tailnet_socket, port: config.mesh.port, log: say }));
    if (this.network === 'lan' && config.mesh.mdns) {
      const mdns = new MdnsFeeder({ name: this.deps.name, advertise: this.advertise, port: this.ml.localMember().port, intervalMs: config.mesh.rejoin_interval, log: say });
      try {
        await mdns.start();
        this.#mdns = mdns;
        this.#feeders.push(mdns);
        mdns.on('peer', () => this.#rejoin?.kick());
      } catch (err) {
        log.warn(`mDNS discovery off: ${(err as Error).message}`);
      }
    }
    this.#rejoin = new RejoinLoop({
      feeders: this.#feeders,
      isAlive: (addr) => this.ml.members().some((m) => m.state === 'alive' && `${m.addr}:${m.port}` === addr),
      self: [this.gossipAddress],
      join: (addrs) => this.ml.join(addrs).then((r) => {
        if (r.joined === 0 && r.errors.length) throw r.errors[0];
      }),
      intervalMs: config.mesh.rejoin_interval,
      log: (msg) => log.debug(msg),
    });
    this.#rejoin.start();
  }

  /** Resolves once the first join attempt (seeds and discovery) has finished, joined or not. */
  firstJoin(): Promise<void> {
    return this.#rejoin?.firstRound ?? Promise.resolve();
  }

  /** Leave gracefully (others see `left`), then close everything. */
  async stop(): Promise<void> {
    this.#unsubscribe?.();
    this.#rejoin?.stop();
    await this.#mdns?.stop().catch(() => {});
    for (const f of this.#feeders) (f as { close?: () => unknown }).close?.();
    await this.ml.leave(2000).catch(() => {});
    await this.ml.shutdown();
  }
}
