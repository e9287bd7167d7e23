/**
 * One `ggml-rpc-server` (llama.cpp's RPC backend, SPEC section 11 "A model
 * bigger than one host"): the memory a member lends, or the runner's own
 * part of a split model. It listens on 127.0.0.1 only (its protocol has no
 * authentication: members reach it through the viiwork tunnel, never
 * directly), is tied to the node's life as llama-server is (setpriv
 * --pdeathsig), and counts as started once it accepts a connection.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import os from 'node:os';
import readline from 'node:readline';
import { findExecutable, RPC_SERVER_BINARY, rpcServerBinary } from '../../config/executable.ts';
import { engineEnv, freePort } from './engine-env.ts';
import { parentDeathPrefix } from './leftovers.ts';
import { killGroup, trackChild } from './llamacpp.ts';

export { RPC_SERVER_BINARY, rpcServerBinary };

/** How long a new rpc-server may take to listen. */
export const RPC_LISTEN_TIMEOUT_MS = 15_000;

/** Threads for a lend's CPU work: half the cores, as the engine's own default, at least 1. */
export function rpcThreads(cores = os.availableParallelism()): number {
  return Math.max(1, Math.floor(cores / 2));
}

export interface RpcServerOptions {
  binary: string;
  threads: number;
  /** A line it printed, for the node's log (prefixed by the caller). */
  log(line: string): void;
  timeoutMs?: number;
}

/** A running rpc-server on 127.0.0.1:port. */
export class RpcServer {
  readonly host = '127.0.0.1';
  #exited = false;
  readonly #exit: Promise<void>;
  readonly #listeners: ((why: string) => void)[] = [];
  #stopping = false;

  private constructor(
    readonly port: number,
    private readonly child: ChildProcess,
  ) {
    this.#exit = new Promise((resolve) =>
      child.once('exit', (code, signal) => {
        this.#exited = true;
        resolve();
        if (!this.#stopping) for (const f of this.#listeners) f(signal ? `ended by ${signal}` : `exited with code ${code}`);
      }),
    );
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  get running(): boolean {
    return !this.#exited;
  }

  /** Called once if the process ends without being stopped. */
  onExit(f: (why: string) => void): void {
    this.#listeners.push(f);
  }

  /** Start one on a free loopback port; resolves once it accepts connections, rejects with why it did not. */
  static async start(o: RpcServerOptions): Promise<RpcServer> {
    const port = await freePort('127.0.0.1');
    const args = ['-H', '127.0.0.1', '-p', String(port), '-t', String(o.threads)];
    const [cmd, ...prefix] = [...parentDeathPrefix(), o.binary];
    const tied = prefix.length > 0 && findExecutable(o.binary, process.env.PATH ?? '', process.cwd()).ok;
    const child = tied
      ? spawn(cmd, [...prefix, ...args], { env: engineEnv(), stdio: ['ignore', 'pipe', 'pipe'], detached: true })
      : spawn(o.binary, args, { env: engineEnv(), stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    const tail: string[] = [];
    for (const input of [child.stdout, child.stderr]) {
      if (!input) continue;
      readline.createInterface({ input, crlfDelay: Infinity }).on('line', (line) => {
        tail.push(line);
        if (tail.length > 5) tail.shift();
        o.log(line);
      });
    }
    const server = new RpcServer(port, child);
    // Killed on the way out should the node exit without stopping it (as its engines are).
    if (child.pid !== undefined) trackChild(child.pid);
    const failed = new Promise<string>((resolve) => {
      child.once('error', (err: NodeJS.ErrnoException) => resolve(`cannot run ${o.binary}: ${err.code ?? err.message}`));
      void server.#exit.then(() => resolve(`${o.binary} exited before it listened${tail.length ? `: ${tail.join(' | ')}` : ''}`));
    });
    const deadline = Date.now() + (o.timeoutMs ?? RPC_LISTEN_TIMEOUT_MS);
    let why: string | undefined;
    void failed.then((w) => (why = w));
    while (why === undefined && Date.now() < deadline) {
      if (await accepts(port)) return server;
      await new Promise((r) => setTimeout(r, 50));
    }
    await server.stop();
    throw new Error(why ?? `${o.binary} did not listen on 127.0.0.1:${port} within ${Math.round((o.timeoutMs ?? RPC_LISTEN_TIMEOUT_MS) / 1000)} s`);
  }

  /** SIGTERM to its process group, SIGKILL after 5 s; resolves once it has exited. Idempotent. */
  async stop(): Promise<void> {
    this.#stopping = true;
    if (this.#exited || this.child.pid === undefined) return;
    killGroup(this.child.pid, 'SIGTERM');
    const timer = setTimeout(() => this.child.pid !== undefined && killGroup(this.child.pid, 'SIGKILL'), 5000);
    await this.#exit;
    clearTimeout(timer);
  }
}


/** Does something accept a TCP connection on 127.0.0.1:port now? */
function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port });
    const done = (ok: boolean) => {
      s.removeAllListeners();
      s.on('error', () => {});
      s.destroy();
      resolve(ok);
    };
    s.once('connect', () => done(true));
    s.once('error', () => done(false));
    s.setTimeout(1000, () => done(false));
  });
}
