/**
 * The gossip engine: one Memberlist with everything its delegate needs kept
 * at hand (our metadata, our push-pull state, the user broadcasts queue), so
 * that probes, acks, gossip and push-pulls never wait for the node. It runs
 * on the gossip worker thread (worker.ts); it knows nothing of threads
 * itself: it takes messages (`handle`) and gives messages (`send`), so the
 * same engine also runs inline (MemberlistThread's `inline` option).
 */
import { TransmitLimitedQueue } from '../memberlist/broadcast-queue.ts';
import { Memberlist } from '../memberlist/memberlist.ts';
import type { Call, EngineInit, FromEngine, ToEngine } from './protocol.ts';
import { bytes, own, plainFields, toWireError, toWireMember } from './protocol.ts';

export type Send = (msg: FromEngine, transfer?: ArrayBuffer[]) => void;

/** How often the engine checks for members memberlist forgot without an event (dead ones after gossipToTheDeadMs). */
const RECONCILE_MS = 1000;

export class GossipEngine {
  #meta: Buffer;
  #state: Buffer;
  readonly #queue: TransmitLimitedQueue;
  #ml!: Memberlist;
  /** Names the node has been told about since the last full list. */
  readonly #told = new Set<string>();
  #reconcile: NodeJS.Timeout | undefined;

  private constructor(
    init: EngineInit,
    private readonly send: Send,
  ) {
    this.#meta = bytes(init.meta);
    this.#state = bytes(init.localState);
    this.#queue = new TransmitLimitedQueue(init.config.retransmitMult ?? 4, () => (this.#ml ? this.#ml.numAlive() : 1));
  }

  /** Starts memberlist and sends `ready` with the member list, or `failed`; resolves with the engine, or undefined when it failed. */
  static async start(init: EngineInit, send: Send): Promise<GossipEngine | undefined> {
    const engine = new GossipEngine(init, send);
    const levels = new Set(init.logLevels);
    const { keys, ...config } = init.config;
    try {
      engine.#ml = await Memberlist.create(
        {
          ...config,
          keys: keys?.map((k) => bytes(k)),
          logger: (level, msg, fields) => {
            if (!levels.has(level)) return;
            try {
              send({ t: 'log', level, msg, fields });
            } catch {
              send({ t: 'log', level, msg, fields: fields && plainFields(fields) });
            }
          },
        },
        {
          nodeMeta: () => engine.#meta,
          localState: () => engine.#state,
          getBroadcasts: (overhead, limit) => engine.#queue.getBroadcasts(overhead, limit),
          notifyMsg: (buf) => {
            const b = own(buf);
            send({ t: 'user', buf: b }, [b.buffer as ArrayBuffer]);
          },
          mergeRemoteState: (buf, join) => {
            const b = own(buf);
            send({ t: 'remoteState', buf: b, join }, [b.buffer as ArrayBuffer]);
          },
        },
      );
    } catch (err) {
      send({ t: 'failed', error: toWireError(err) });
      return undefined;
    }
    engine.#wire();
    return engine;
  }

  #wire(): void {
    const ml = this.#ml;
    for (const ev of ['join', 'update', 'leave'] as const) {
      ml.on(ev, (m) => {
        this.#told.add(m.name);
        const member = toWireMember(m);
        this.send({ t: 'event', ev, member }, [member.meta.buffer as ArrayBuffer]);
      });
    }
    ml.on('conflict', (other, info) => this.send({ t: 'conflict', member: toWireMember(other), duringJoin: info.duringJoin }));
    const members = this.#list();
    this.send({ t: 'ready', self: ml.localMember().name, members });
    // Events only add names: a list shorter than what the node was told means memberlist forgot someone.
    this.#reconcile = setInterval(() => {
      if (this.#ml.members().length !== this.#told.size) this.send({ t: 'members', members: this.#list() });
    }, RECONCILE_MS);
    this.#reconcile.unref();
  }

  #list() {
    const list = this.#ml.members();
    this.#told.clear();
    for (const m of list) this.#told.add(m.name);
    return list.map(toWireMember);
  }

  handle(msg: ToEngine): void {
    switch (msg.t) {
      case 'state':
        this.#state = bytes(msg.buf);
        return;
      case 'broadcast':
        this.#queue.queueBroadcast({ name: msg.name, msg: bytes(msg.msg) });
        return;
      case 'call':
        this.#call(msg.call).then(
          (value) => this.send({ t: 'reply', id: msg.id, value }),
          (err) => this.send({ t: 'reply', id: msg.id, error: toWireError(err) }),
        );
    }
  }

  async #call(call: Call): Promise<unknown> {
    switch (call.op) {
      case 'join': {
        const r = await this.#ml.join(call.addrs);
        return { joined: r.joined, errors: r.errors.map(toWireError) };
      }
      case 'updateMeta':
        this.#meta = bytes(call.meta);
        return this.#ml.updateMeta(call.timeoutMs);
      case 'leave':
        return this.#ml.leave(call.timeoutMs);
      case 'shutdown':
        clearInterval(this.#reconcile);
        return this.#ml.shutdown();
    }
  }
}
