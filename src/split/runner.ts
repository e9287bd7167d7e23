/**
 * The runner's side of a model bigger than one host (SPEC section 11): the
 * plan from this node's snapshot (route/split-plan.ts), the lends asked of
 * each lender (POST /v1/split/lend, signed as any member call), a tunnel
 * to each (split/tunnel.ts: llama-server talks to a port on this node's
 * loopback, never to a lender's address), the runner's own part (an
 * rpc-server on its own loopback), and the leases renewed while the model
 * runs. A lender that dies, leaves, stops answering for a lease or no
 * longer holds its lend loses the model: `onLost` says why, once; what the
 * model held elsewhere is released when it stops (`close`).
 */
import type { MemberLink } from '../forward/member-call.ts';
import { postToMember } from '../forward/member-call.ts';
import { planSplit, tensorSplit, type SplitMember, type SplitPart, type SplitPlan } from '../route/split-plan.ts';
import type { HostView } from '../route/types.ts';
import { bytesText } from '../lifecycle/lifecycle.ts';
import { LEND_LEASE_MS } from './lends.ts';

export const SPLIT_LEND_PATH = '/v1/split/lend';
export const SPLIT_RENEW_PATH = '/v1/split/renew';
export const SPLIT_RELEASE_PATH = '/v1/split/release';

/** A local end of a tunnel to a lender's rpc-server (split/tunnel.ts openTunnel). */
export interface TunnelEnd {
  host: string;
  port: number;
  close(): Promise<void>;
}

/** An rpc-server of the runner's own (engines/llamacpp/rpc-server.ts RpcServer). */
export interface LocalPart {
  readonly host: string;
  readonly port: number;
  onExit(f: (why: string) => void): void;
  stop(): Promise<void>;
}

export interface SplitRunnerPorts {
  readonly self: string;
  readonly link: MemberLink;
  /** The routing snapshot: every member's memory and whether it lends. */
  snapshot(): HostView[];
  /** A member's state in the member table (alive, suspect, dead, left), undefined when unknown. */
  memberState(name: string): string | undefined;
  openTunnel(member: string, lendId: string): Promise<TunnelEnd>;
  /** The runner's own part: an rpc-server beside this llama-server. */
  startLocal(llamaServer: string): Promise<LocalPart>;
  log(line: string): void;
  now(): number;
  /** How long a lender may go without answering a renewal (its lease; default LEND_LEASE_MS). */
  leaseMs?: number;
}

/** One model running split: its parts and what holds them. */
export interface SplitRun {
  readonly model: string;
  readonly parts: readonly SplitPart[];
  /** `--rpc …` and friends for llama-server. */
  readonly args: string[];
  /** What the feed and the log say of it. */
  readonly describe: string;
  /** Called once when a part is lost (not after close). */
  onLost(f: (why: string) => void): void;
  /** Everything down: tunnels closed, the own part stopped, the lends released. Idempotent. */
  close(): Promise<void>;
}

interface Held {
  member: string;
  lendId: string;
  tunnel?: TunnelEnd;
  /** Clock ms of the last renewal the lender answered. */
  answeredAt: number;
}

/** The plan for `model` (`need` bytes, `free` here) with this node as runner, from the snapshot. */
export function planHere(self: string, hosts: readonly HostView[], need: number, free: number, split: 'auto' | readonly string[]): SplitPlan {
  const members: SplitMember[] = [{ name: self, free, runs: true, lends: false }];
  for (const h of hosts) {
    if (h.local || !h.fresh || h.draining || !h.lends || !h.memory) continue;
    members.push({ name: h.name, free: h.memory.free, runs: false, lends: true });
  }
  return planSplit({ need, members, split, runner: self });
}

export class SplitRunner {
  readonly #runs = new Set<RunImpl>();

  constructor(private readonly p: SplitRunnerPorts) {}

  plan(need: number, free: number, split: 'auto' | readonly string[]): SplitPlan {
    return planHere(this.p.self, this.p.snapshot(), need, free, split);
  }

  /** Ask each lender for its part, open the tunnels, start the own part; rejects (having released all) with why. */
  async assemble(model: string, llamaServer: string, parts: readonly SplitPart[]): Promise<SplitRun> {
    const run = new RunImpl(this.p, model, llamaServer, parts, () => this.#runs.delete(run));
    try {
      await run.assemble();
    } catch (err) {
      await run.close();
      throw err;
    }
    this.#runs.add(run);
    return run;
  }

  /** The member table changed: a lender that died or left loses its runs. */
  membersChanged(): void {
    for (const run of this.#runs) run.checkMembers();
  }

  /** Runs now (status, tests). */
  runs(): { model: string; parts: readonly SplitPart[] }[] {
    return [...this.#runs].map((r) => ({ model: r.model, parts: r.parts }));
  }
}

class RunImpl implements SplitRun {
  readonly held: Held[] = [];
  local: LocalPart | undefined;
  args: string[] = [];
  #lost: ((why: string) => void)[] = [];
  #lostWhy: string | undefined;
  #closed: Promise<void> | undefined;
  #timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly p: SplitRunnerPorts,
    readonly model: string,
    private readonly llamaServer: string,
    readonly parts: readonly SplitPart[],
    private readonly forget: () => void,
  ) {}

  get describe(): string {
    return `split across ${this.parts.map((x) => `${x.member} ${bytesText(x.bytes)}`).join(', ')}`;
  }

  get #leaseMs(): number {
    return this.p.leaseMs ?? LEND_LEASE_MS;
  }

  async assemble(): Promise<void> {
    const [own, ...lent] = this.parts;
    // Asked one at a time: a refusal stops the assembly before more memory is held elsewhere.
    for (const part of lent) {
      const a = await postToMember(this.p.link, part.member, SPLIT_LEND_PATH, { model: this.model, bytes: part.bytes }, 30_000);
      const id = (a.body as { lend_id?: unknown } | undefined)?.lend_id;
      if (a.status !== 200 || typeof id !== 'string') {
        const msg = (a.body as { error?: { message?: string } } | undefined)?.error?.message ?? a.text;
        throw new Error(`${part.member} did not lend ${bytesText(part.bytes)}: ${a.status ? `${a.status} ` : ''}${msg}`);
      }
      this.held.push({ member: part.member, lendId: id, answeredAt: this.p.now() });
    }
    for (const h of this.held) {
      try {
        h.tunnel = await this.p.openTunnel(h.member, h.lendId);
      } catch (err) {
        throw new Error(`no tunnel to ${h.member}'s lend: ${(err as Error).message}`);
      }
    }
    this.local = await this.p.startLocal(this.llamaServer);
    this.local.onExit((why) => this.#lose(`this node's own part (ggml-rpc-server) ${why}`));
    const endpoints = [`${this.local.host}:${this.local.port}`, ...this.held.map((h) => `${h.tunnel!.host}:${h.tunnel!.port}`)];
    // Every layer on the RPC devices, in proportion to the parts (the own part first, as --rpc lists it).
    this.args = ['--rpc', endpoints.join(','), '-ngl', '999', '--tensor-split', tensorSplit([own, ...lent])];
    this.#timer = setInterval(() => void this.#renew(), Math.max(200, Math.floor(this.#leaseMs / 3)));
    this.#timer.unref();
  }

  onLost(f: (why: string) => void): void {
    if (this.#lostWhy !== undefined) return void f(this.#lostWhy);
    this.#lost.push(f);
  }

  checkMembers(): void {
    for (const h of this.held) {
      const state = this.p.memberState(h.member);
      if (state === undefined || state === 'dead' || state === 'left') this.#lose(`lender ${h.member} ${state === undefined ? 'is no longer a member' : `is ${state}`}`);
    }
  }

  async #renew(): Promise<void> {
    if (this.#closed || this.#lostWhy !== undefined) return;
    await Promise.all(
      this.held.map(async (h) => {
        const a = await postToMember(this.p.link, h.member, SPLIT_RENEW_PATH, { lend_id: h.lendId }, Math.max(1000, Math.floor(this.#leaseMs / 3)));
        if (a.status === 200) h.answeredAt = this.p.now();
        else if (a.status === 404) this.#lose(`lender ${h.member} no longer holds the lend (its ggml-rpc-server stopped, or its lease ran out)`);
        else if (this.p.now() - h.answeredAt > this.#leaseMs) this.#lose(`lender ${h.member} has not answered for ${Math.round(this.#leaseMs / 1000)} s`);
      }),
    );
  }

  #lose(why: string): void {
    if (this.#closed || this.#lostWhy !== undefined) return;
    this.#lostWhy = why;
    this.p.log(`${this.model}: ${why}; stopping the split model (it is placed again when room returns)`);
    for (const f of this.#lost) f(why);
  }

  close(): Promise<void> {
    this.#closed ??= (async () => {
      clearInterval(this.#timer);
      this.forget();
      await Promise.all(this.held.map((h) => h.tunnel?.close().catch(() => {})));
      await this.local?.stop().catch(() => {});
      // Released best effort: a lender gone frees the lend itself when its lease runs out.
      await Promise.all(this.held.map((h) => postToMember(this.p.link, h.member, SPLIT_RELEASE_PATH, { lend_id: h.lendId }, 5000)));
    })();
    return this.#closed;
  }
}

