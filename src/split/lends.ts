/**
 * The memory this node lends to members running a model bigger than one
 * host (SPEC section 11): each lend is one `ggml-rpc-server` on 127.0.0.1
 * for one member, its bytes reserved in this node's budget from the ask on
 * (so two asks at once cannot both take the same room), known by an opaque
 * id. A lend ends when its member releases it, when its lease is not
 * renewed (the member died, left or lost its model), when the member leaves
 * the mesh, or when its process ends; its bytes return to the budget then.
 * Nothing is lent unless the operator set `node.lend_memory: true`.
 */
import crypto from 'node:crypto';
import { bytesText } from '../lifecycle/lifecycle.ts';

/** How long a lend lives without a renewal; runners renew every third of it. */
export const LEND_LEASE_MS = 10_000;

/** The process behind a lend (engines/llamacpp/rpc-server.ts RpcServer). */
export interface LendProcess {
  readonly port: number;
  readonly pid?: number;
  onExit(f: (why: string) => void): void;
  stop(): Promise<void>;
}

export interface Lend {
  readonly id: string;
  /** The member the memory is lent to. */
  readonly to: string;
  readonly model: string;
  readonly bytes: number;
  /** Clock ms it was asked for. */
  readonly since: number;
  leaseUntil: number;
  /** Undefined while its process starts. */
  process?: LendProcess;
  /** Its process is being stopped: no new connection reaches it, its bytes stay reserved until it is gone. */
  ending?: boolean;
}

/** A lend as reports show it (no port: the tunnel alone reaches it). */
export interface LendView {
  id: string;
  to: string;
  model: string;
  bytes: number;
  since: number;
  state: 'starting' | 'serving';
}

export type LendAnswer =
  | { kind: 'lent'; id: string; bytes: number; leaseMs: number }
  | { kind: 'off' }
  | { kind: 'no-room'; need: number; free: number }
  | { kind: 'failed'; why: string };

export interface LendPorts {
  /** node.lend_memory. */
  readonly enabled: boolean;
  /** Free bytes of this node's budget now, lends already counted as used. */
  free(): number;
  /** Start the process of a new lend (an rpc-server on loopback). */
  start(lendId: string): Promise<LendProcess>;
  now(): number;
  log(line: string): void;
  /** The lent bytes changed (the budget's `used` moves with them). */
  changed?(): void;
  leaseMs?: number;
}

export class LendBook {
  readonly #lends = new Map<string, Lend>();
  #timer: NodeJS.Timeout | undefined;

  constructor(private readonly p: LendPorts) {}

  get enabled(): boolean {
    return this.p.enabled;
  }

  get leaseMs(): number {
    return this.p.leaseMs ?? LEND_LEASE_MS;
  }

  /** Bytes lent now, counting lends whose process is still starting. */
  lentBytes(): number {
    let n = 0;
    for (const l of this.#lends.values()) n += l.bytes;
    return n;
  }

  list(): LendView[] {
    return [...this.#lends.values()].map((l) => ({ id: l.id, to: l.to, model: l.model, bytes: l.bytes, since: l.since, state: l.process ? 'serving' : 'starting' }));
  }

  /** The loopback port of a serving lend (the tunnel pipes to it), else undefined. */
  /** The loopback port of lend `id`, for the member it was lent to only (another member knowing the id gets nothing). */
  lendPort(id: string, member: string): number | undefined {
    const l = this.#lends.get(id);
    return l && !l.ending && l.to === member ? l.process?.port : undefined;
  }

  /** Lend `bytes` to member `to` for `model`: reserved at once, then its process started. */
  async lend(to: string, model: string, bytes: number): Promise<LendAnswer> {
    if (!this.p.enabled) return { kind: 'off' };
    const free = this.p.free();
    if (!(bytes > 0) || bytes > free) return { kind: 'no-room', need: bytes, free };
    const id = crypto.randomBytes(12).toString('base64url');
    const now = this.p.now();
    const lend: Lend = { id, to, model, bytes, since: now, leaseUntil: now + this.leaseMs };
    this.#lends.set(id, lend);
    this.p.changed?.();
    let proc: LendProcess;
    try {
      proc = await this.p.start(id);
    } catch (err) {
      this.#lends.delete(id);
      this.p.changed?.();
      const why = (err as Error).message;
      this.p.log(`lend to ${to} for ${model} failed: ${why}`);
      return { kind: 'failed', why };
    }
    if (!this.#lends.has(id) || lend.ending) {
      // Released (or its member gone) while starting.
      await proc.stop();
      return { kind: 'failed', why: 'released while starting' };
    }
    lend.process = proc;
    lend.leaseUntil = this.p.now() + this.leaseMs;
    proc.onExit((why) => {
      if (this.#lends.get(id)?.process !== proc) return;
      this.#end(id, `its ggml-rpc-server ${why}`);
    });
    this.p.log(`lending ${bytesText(bytes)} to ${to} for ${model} (lend ${id}, ggml-rpc-server pid ${proc.pid ?? '?'} on 127.0.0.1:${proc.port})`);
    return { kind: 'lent', id, bytes, leaseMs: this.leaseMs };
  }

  /** The member renews its lease; false when the lend is not (or no longer) there or not its. */
  renew(id: string, from: string): boolean {
    const l = this.#lends.get(id);
    if (!l || l.to !== from || l.ending) return false;
    l.leaseUntil = this.p.now() + this.leaseMs;
    return true;
  }

  /** The member gives its lend back. */
  async release(id: string, from: string, why = 'released by its member'): Promise<boolean> {
    const l = this.#lends.get(id);
    if (!l || l.to !== from) return false;
    await this.#end(id, why);
    return true;
  }

  /** A member left or died: everything lent to it comes back. */
  memberGone(member: string, why: string): void {
    for (const l of [...this.#lends.values()]) if (l.to === member) void this.#end(l.id, `${member} ${why}`);
  }

  /** End the lends whose lease ran out. */
  sweep(): void {
    const now = this.p.now();
    for (const l of [...this.#lends.values()]) if (l.process && !l.ending && now > l.leaseUntil) void this.#end(l.id, `${l.to} stopped renewing its lease (${Math.round(this.leaseMs / 1000)} s)`);
  }

  start(everyMs = 1000): void {
    this.#timer = setInterval(() => this.sweep(), everyMs);
    this.#timer.unref();
  }

  /** Every lend ends (the node stops). */
  async stop(): Promise<void> {
    clearInterval(this.#timer);
    await Promise.all([...this.#lends.keys()].map((id) => this.#end(id, 'this node is stopping')));
  }

  async #end(id: string, why: string): Promise<void> {
    const l = this.#lends.get(id);
    if (!l || l.ending) return;
    l.ending = true;
    this.p.log(`lend ${id} of ${bytesText(l.bytes)} to ${l.to} for ${l.model} ended: ${why}`);
    try {
      await l.process?.stop();
    } finally {
      this.#lends.delete(id);
      this.p.changed?.();
    }
  }
}

