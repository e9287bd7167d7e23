/**
 * MemberlistThread: memberlist on a worker thread of its own, seen from the
 * node as (almost) the Memberlist it would otherwise run in-process.
 *
 * Why: probes must be answered within 500 ms, and the node's event loop
 * also parses bodies, relays streams and collects garbage; a stall there
 * (a busy handler, a GC pause) would make peers suspect a node that is
 * alive. On its own thread the engine (sockets, timers, probes, LZW,
 * AES-GCM) keeps time whatever the node does.
 *
 * ```ts
 * const ml = await MemberlistThread.start({ config, nodeMeta, localState, logger, notifyMsg, mergeRemoteState });
 * ml.on('join' | 'update' | 'leave', (m) => …); ml.on('conflict', (other, info) => …);
 * ml.on('failed', (err) => …);          // the engine died: the node is out of the mesh
 * ml.members(); ml.localMember(); ml.numAlive();   // a mirror, updated before each event
 * await ml.join(['10.0.0.2:7946']); await ml.updateMeta();
 * ml.setLocalState(buf); ml.queueBroadcast(name, msg);
 * await ml.leave(2000); await ml.shutdown();
 * ```
 *
 * The member list is mirrored here: the engine sends each member with its
 * event (so listeners see every state, as in-process), and the whole list
 * when memberlist forgets members without one. Metadata is computed here
 * (`nodeMeta`, at start and on updateMeta) and sent; the push-pull state is
 * sent on every change (setLocalState), so the engine never asks. User
 * messages, remote push-pull state and log lines come back as messages.
 *
 * A worker that throws or exits is never silent: pending calls reject, the
 * logger gets an error line and 'failed' is emitted.
 */
import { EventEmitter } from 'node:events';
import { Worker } from 'node:worker_threads';
import type { Member } from '../memberlist/memberlist.ts';
import type { Logger, LogLevel } from '../memberlist/state.ts';
import { GossipEngine } from './engine.ts';
import type { Call, EngineConfig, EngineInit, FromEngine, JoinResult, ToEngine } from './protocol.ts';
import { bytes, fromWireError, fromWireMember, own } from './protocol.ts';

export interface MemberlistThreadOptions {
  config: EngineConfig;
  /** Our metadata (≤ 512 bytes), computed on this thread at start and on every updateMeta(). */
  nodeMeta: () => Buffer;
  /** Our push-pull user state at start; setLocalState() replaces it. */
  localState?: Buffer;
  /** Gets the engine's log lines (memberlist's own, and this class's errors). */
  logger?: Logger;
  /** Levels the engine sends at all. Default: every level. */
  logLevels?: LogLevel[];
  /** A user message arrived. */
  notifyMsg?: (buf: Buffer) => void;
  /** User state from a peer's push-pull. */
  mergeRemoteState?: (buf: Buffer, join: boolean) => void;
  /**
   * Run the engine on this thread instead (same messages, no isolation): a
   * stall of this thread then stalls gossip too. For comparison and
   * debugging only.
   */
  inline?: boolean;
}

export interface MemberlistThreadEvents {
  join: [Member];
  update: [Member];
  leave: [Member];
  conflict: [Member, { duringJoin: boolean }];
  /** The engine is gone (threw, or exited without being shut down). */
  failed: [Error];
  /** A promise in the engine rejected with nobody to catch it (a bug); the engine goes on. */
  unhandled: [Error];
}

/** How long shutdown waits for the engine to close its sockets before the thread is terminated anyway. */
const SHUTDOWN_GRACE_MS = 3000;

/** The two ends' plumbing: a worker thread, or the engine in this thread. */
interface Channel {
  post(msg: ToEngine, transfer?: ArrayBuffer[]): void;
  close(): Promise<void>;
}

export class MemberlistThread extends EventEmitter<MemberlistThreadEvents> {
  readonly #mirror = new Map<string, Member>();
  readonly #pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  #self = '';
  #ids = 0;
  #channel!: Channel;
  /** Set once shutdown began or the engine failed: an exit is then expected. */
  #closing = false;
  #dead: Error | undefined;

  private constructor(private readonly opts: MemberlistThreadOptions) {
    super();
  }

  /** Starts the engine; rejects with memberlist's own error (its `code`, e.g. EADDRINUSE, kept) when it cannot. */
  static async start(opts: MemberlistThreadOptions): Promise<MemberlistThread> {
    const t = new MemberlistThread(opts);
    const init: EngineInit = {
      config: opts.config,
      meta: own(opts.nodeMeta()),
      localState: own(opts.localState ?? Buffer.alloc(0)),
      logLevels: opts.logLevels ?? ['debug', 'info', 'warn', 'error'],
    };
    await new Promise<void>((resolve, reject) => {
      let started = false;
      const onMessage = (msg: FromEngine) => {
        if (msg.t === 'ready') {
          started = true;
          t.#self = msg.self;
          for (const m of msg.members) t.#mirror.set(m.name, fromWireMember(m));
          resolve();
        } else if (msg.t === 'failed') {
          t.#closing = true;
          void t.#channel.close();
          reject(fromWireError(msg.error));
        } else t.#receive(msg);
      };
      const onGone = (err: Error) => {
        if (!started) {
          t.#closing = true;
          reject(err);
        } else t.#fail(err);
      };
      t.#channel = opts.inline ? inlineChannel(init, onMessage, onGone) : workerChannel(init, onMessage, onGone, () => t.#closing);
    });
    return t;
  }

  #receive(msg: FromEngine): void {
    switch (msg.t) {
      case 'event': {
        const m = fromWireMember(msg.member);
        this.#mirror.set(m.name, m);
        this.emit(msg.ev, m);
        return;
      }
      case 'conflict':
        this.emit('conflict', fromWireMember(msg.member), { duringJoin: msg.duringJoin });
        return;
      case 'members':
        this.#mirror.clear();
        for (const m of msg.members) this.#mirror.set(m.name, fromWireMember(m));
        return;
      case 'log':
        this.opts.logger?.(msg.level, msg.msg, msg.fields);
        return;
      case 'user':
        this.opts.notifyMsg?.(bytes(msg.buf));
        return;
      case 'remoteState':
        this.opts.mergeRemoteState?.(bytes(msg.buf), msg.join);
        return;
      case 'unhandled': {
        const err = fromWireError(msg.error);
        if (!this.emit('unhandled', err)) this.opts.logger?.('error', `unhandled rejection in the gossip engine: ${err.stack ?? err.message}`);
        return;
      }
      case 'reply': {
        const p = this.#pending.get(msg.id);
        this.#pending.delete(msg.id);
        if (msg.error) p?.reject(fromWireError(msg.error));
        else p?.resolve(msg.value);
        return;
      }
    }
  }

  #fail(err: Error): void {
    if (this.#dead) return;
    this.#dead = err;
    this.#closing = true;
    for (const p of this.#pending.values()) p.reject(err);
    this.#pending.clear();
    this.opts.logger?.('error', err.message);
    this.emit('failed', err);
  }

  #call<T>(call: Call, timeoutMs?: number, transfer?: ArrayBuffer[]): Promise<T> {
    if (this.#dead) return Promise.reject(this.#dead);
    const id = ++this.#ids;
    return new Promise<T>((resolve, reject) => {
      const timer =
        timeoutMs === undefined
          ? undefined
          : setTimeout(() => {
              this.#pending.delete(id);
              reject(new Error(`the gossip engine did not answer ${call.op} within ${timeoutMs} ms`));
            }, timeoutMs);
      this.#pending.set(id, {
        resolve: (v) => {
          clearTimeout(timer);
          resolve(v as T);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
      this.#channel.post({ t: 'call', id, call }, transfer);
    });
  }

  /** Every node memberlist tracks, us included (the mirror as of the last message from the engine). */
  members(): Member[] {
    return [...this.#mirror.values()];
  }

  localMember(): Member {
    return this.#mirror.get(this.#self)!;
  }

  /** Alive or suspect nodes, us included. */
  numAlive(): number {
    let n = 0;
    for (const m of this.#mirror.values()) if (m.state === 'alive' || m.state === 'suspect') n++;
    return n;
  }

  /** Joins through each "ip:port" with a push-pull; resolves with how many answered. */
  async join(addrs: string[]): Promise<{ joined: number; errors: Error[] }> {
    const r = await this.#call<JoinResult>({ op: 'join', addrs });
    return { joined: r.joined, errors: r.errors.map(fromWireError) };
  }

  /** Computes nodeMeta() again and gossips it. */
  updateMeta(timeoutMs = 5000): Promise<void> {
    const meta = own(this.opts.nodeMeta());
    return this.#call({ op: 'updateMeta', meta, timeoutMs }, timeoutMs + SHUTDOWN_GRACE_MS, [meta.buffer as ArrayBuffer]);
  }

  /** The push-pull user state from now on. */
  setLocalState(buf: Buffer): void {
    if (this.#dead) return;
    const b = own(buf);
    this.#channel.post({ t: 'state', buf: b }, [b.buffer as ArrayBuffer]);
  }

  /** A user message to gossip (retransmit-limited); a newer one with the same name replaces a queued one. */
  queueBroadcast(name: string, msg: Buffer): void {
    if (this.#dead) return;
    const b = own(msg);
    this.#channel.post({ t: 'broadcast', name, msg: b }, [b.buffer as ArrayBuffer]);
  }

  /** Gossips our departure and waits up to timeoutMs for it to go out. */
  leave(timeoutMs = 5000): Promise<void> {
    return this.#call({ op: 'leave', timeoutMs }, timeoutMs + SHUTDOWN_GRACE_MS);
  }

  /** Closes the sockets and ends the thread, without telling anyone (leave() first for that). */
  async shutdown(): Promise<void> {
    if (!this.#closing) {
      this.#closing = true;
      await this.#call({ op: 'shutdown' }, SHUTDOWN_GRACE_MS).catch(() => {});
    }
    await this.#channel.close();
    // A call still waiting (a join of the rejoin loop) would wait for ever on a thread that is gone.
    this.#dead ??= new Error('memberlist has been shut down');
    for (const p of this.#pending.values()) p.reject(this.#dead);
    this.#pending.clear();
  }
}

function workerChannel(init: EngineInit, onMessage: (m: FromEngine) => void, onGone: (e: Error) => void, expectedExit: () => boolean): Channel {
  const worker = new Worker(new URL('./worker.mjs', import.meta.url), { workerData: init, name: 'viiwork-gossip' });
  let exited = false;
  const exit = new Promise<void>((resolve) =>
    worker.once('exit', (code) => {
      exited = true;
      if (!expectedExit()) onGone(new Error(`the gossip worker thread exited (code ${code}); this node is out of the mesh until it restarts`));
      resolve();
    }),
  );
  worker.on('message', onMessage);
  worker.on('error', (err) => onGone(new Error(`the gossip worker thread failed: ${err.stack ?? err.message}`)));
  worker.on('messageerror', (err) => onGone(new Error(`a message from the gossip worker thread could not be read: ${err.message}`)));
  return {
    post: (msg, transfer) => worker.postMessage(msg, transfer),
    async close() {
      if (!exited) await worker.terminate();
      await exit;
    },
  };
}

/** The engine on this thread, messages delivered in order one microtask later (as a port would, without the thread). */
function inlineChannel(init: EngineInit, onMessage: (m: FromEngine) => void, onGone: (e: Error) => void): Channel {
  let engine: GossipEngine | undefined;
  let closed = false;
  const started = GossipEngine.start(init, (msg) => queueMicrotask(() => !closed && onMessage(msg))).then(
    (e) => (engine = e),
    (err) => onGone(err as Error),
  );
  return {
    post: (msg) => queueMicrotask(() => engine?.handle(msg)),
    async close() {
      await started;
      closed = true;
    },
  };
}
