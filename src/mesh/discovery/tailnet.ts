/**
 * Tailnet discovery: ask the local tailscaled which peers are online.
 *
 * `GET /localapi/v0/status` over tailscaled's unix socket, with Host
 * `local-tailscaled.sock` and `Sec-Tailscale: localapi`, and never an
 * Origin or Referer (tailscaled answers those with 403). Every peer with
 * `Online: true` is proposed at its first IPv4 Tailscale address on the mesh
 * port; offline peers are never dialled. `Self.TailscaleIPs`' first IPv4 is
 * this node's advertise address on `mesh.network: tailnet` (and on `auto`
 * when tailscaled answers).
 */
import net from 'node:net';
import { Agent, request } from 'undici';
import { ChangeLogger, joinHostPort, silentLogger, type Feeder, type Logger } from './feeder.ts';

export const DEFAULT_TAILNET_SOCKET = '/var/run/tailscale/tailscaled.sock';
export const DEFAULT_TAILNET_TIMEOUT_MS = 1500;
const STATUS_URL = 'http://local-tailscaled.sock/localapi/v0/status';

/** The parts of tailscaled's status document viiwork reads. */
export interface TailnetPeer {
  HostName?: string;
  DNSName?: string;
  TailscaleIPs?: string[] | null;
  Online?: boolean;
}

export interface TailnetStatus {
  BackendState?: string;
  Self?: TailnetPeer | null;
  Peer?: Record<string, TailnetPeer> | null;
}

function firstIPv4(ips: unknown): string | undefined {
  if (!Array.isArray(ips)) return undefined;
  return ips.find((ip): ip is string => typeof ip === 'string' && net.isIPv4(ip));
}

/** `Self`'s first IPv4 Tailscale address. */
export function selfTailnetAddress(status: TailnetStatus): string | undefined {
  return firstIPv4(status.Self?.TailscaleIPs);
}

/** "ip:port" of every online peer that has an IPv4 address, sorted, without this node. */
export function onlinePeerAddresses(status: TailnetStatus, port: number): string[] {
  const self = selfTailnetAddress(status);
  const out = new Set<string>();
  for (const peer of Object.values(status.Peer ?? {})) {
    if (!peer || typeof peer !== 'object' || peer.Online !== true) continue;
    const ip = firstIPv4(peer.TailscaleIPs);
    if (ip && ip !== self) out.add(joinHostPort(ip, port));
  }
  return [...out].sort();
}

export class TailnetError extends Error {
  constructor(
    message: string,
    readonly code: 'unreachable' | 'status' | 'malformed',
  ) {
    super(message);
    this.name = 'TailnetError';
  }
}

/**
 * One status request. Throws TailnetError when the socket does not answer
 * within `timeoutMs`, answers other than 200, or sends something that is
 * not a status document.
 */
export async function fetchTailnetStatus(dispatcher: Agent, socketPath: string, timeoutMs: number): Promise<TailnetStatus> {
  let res;
  try {
    res = await request(STATUS_URL, {
      dispatcher,
      method: 'GET',
      headers: { 'sec-tailscale': 'localapi', accept: 'application/json' },
      signal: AbortSignal.timeout(timeoutMs),
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
    });
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    throw new TailnetError(`tailscaled at ${socketPath} does not answer (${e.code ?? e.name}: ${e.message})`, 'unreachable');
  }
  if (res.statusCode !== 200) {
    await res.body.dump().catch(() => {});
    throw new TailnetError(`tailscaled at ${socketPath} answered ${res.statusCode} to ${STATUS_URL.slice(STATUS_URL.indexOf('/localapi'))}`, 'status');
  }
  let doc: unknown;
  try {
    doc = await res.body.json();
  } catch (err) {
    throw new TailnetError(`tailscaled at ${socketPath} sent an unreadable status: ${(err as Error).message}`, 'malformed');
  }
  if (!doc || typeof doc !== 'object' || Array.isArray(doc)) {
    throw new TailnetError(`tailscaled at ${socketPath} sent a status that is not a JSON object`, 'malformed');
  }
  return doc as TailnetStatus;
}

function socketAgent(socketPath: string, timeoutMs: number): Agent {
  return new Agent({ connect: { socketPath, timeout: timeoutMs }, keepAliveTimeout: 1000, pipelining: 1 });
}

/** One-shot status read with its own connection; undefined when tailscaled does not answer. */
export async function readTailnetStatus(socketPath: string, timeoutMs = DEFAULT_TAILNET_TIMEOUT_MS): Promise<TailnetStatus | undefined> {
  const agent = socketAgent(socketPath, timeoutMs);
  try {
    return await fetchTailnetStatus(agent, socketPath, timeoutMs);
  } catch {
    return undefined;
  } finally {
    await agent.close().catch(() => {});
  }
}

/** Whether tailscaled answers a status request on `socketPath` (`mesh.network: auto`). */
export async function tailscaledAnswers(socketPath: string, timeoutMs = DEFAULT_TAILNET_TIMEOUT_MS): Promise<boolean> {
  return (await readTailnetStatus(socketPath, timeoutMs)) !== undefined;
}

/** This node's Tailscale IPv4 (its advertise address on a tailnet); undefined when unknown. */
export async function tailnetSelfAddress(socketPath: string, timeoutMs = DEFAULT_TAILNET_TIMEOUT_MS): Promise<string | undefined> {
  const status = await readTailnetStatus(socketPath, timeoutMs);
  return status && selfTailnetAddress(status);
}

export interface TailnetFeederOptions {
  socketPath: string;
  /** The mesh port every peer gossips on. */
  port: number;
  timeoutMs?: number;
  log?: Logger;
}

/** Proposes every online tailnet peer. Errors are logged once per change and yield no candidates. */
export class TailnetFeeder implements Feeder {
  readonly name = 'tailnet';
  readonly #opts: Required<TailnetFeederOptions>;
  readonly #agent: Agent;
  readonly #problems: ChangeLogger;
  #closed = false;

  constructor(opts: TailnetFeederOptions) {
    this.#opts = { timeoutMs: DEFAULT_TAILNET_TIMEOUT_MS, log: silentLogger, ...opts };
    this.#agent = socketAgent(opts.socketPath, this.#opts.timeoutMs);
    this.#problems = new ChangeLogger(this.#opts.log);
  }

  async candidates(): Promise<string[]> {
    if (this.#closed) return [];
    try {
      const status = await fetchTailnetStatus(this.#agent, this.#opts.socketPath, this.#opts.timeoutMs);
      const peers = onlinePeerAddresses(status, this.#opts.port);
      this.#problems.ok(`tailscaled answers again at ${this.#opts.socketPath}`, { peers: peers.length });
      return peers;
    } catch (err) {
      this.#problems.problem(`tailnet discovery: ${(err as Error).message}`);
      return [];
    }
  }

  async close(): Promise<void> {
    this.#closed = true;
    await this.#agent.close().catch(() => {});
  }
}
