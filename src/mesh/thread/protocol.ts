/**
 * The messages between the node (main thread) and the gossip engine (its
 * worker thread): the whole interface of memberlist once it runs on a
 * thread of its own. Nothing here waits on the other side: the engine
 * answers probes, metadata and push-pull state from what it holds, and only
 * tells the node what happened (members, user messages, logs).
 *
 * Everything survives structured cloning: bytes travel as Uint8Arrays that
 * own their memory (a Buffer that is a window on a bigger packet would
 * clone the whole packet), errors as plain objects.
 */
import type { LogLevel } from '../memberlist/state.ts';
import type { Member, MemberlistConfig } from '../memberlist/memberlist.ts';

/** Memberlist's config minus what cannot cross threads (the logger is replaced by `log` messages). */
export type EngineConfig = Omit<MemberlistConfig, 'logger' | 'transport' | 'clock'>;

/** What the engine starts with (the worker's workerData). */
export interface EngineInit {
  config: EngineConfig;
  /** Our node metadata (alive messages). */
  meta: Uint8Array;
  /** Our push-pull user state, until the node sends a newer one. */
  localState: Uint8Array;
  /** Log levels worth a message to the node (the rest is dropped in the engine). */
  logLevels: LogLevel[];
}

export type WireMember = Omit<Member, 'meta'> & { meta: Uint8Array };

export interface WireError {
  name: string;
  message: string;
  code?: string;
  stack?: string;
}

export interface JoinResult {
  joined: number;
  errors: WireError[];
}

export type Call =
  | { op: 'join'; addrs: string[] }
  | { op: 'updateMeta'; meta: Uint8Array; timeoutMs: number }
  | { op: 'leave'; timeoutMs: number }
  | { op: 'shutdown' };

/** Node → engine. */
export type ToEngine =
  | { t: 'call'; id: number; call: Call }
  /** The latest push-pull user state (the node sends it on every change). */
  | { t: 'state'; buf: Uint8Array }
  /** A user broadcast to piggyback on gossip; a newer one with the same name replaces it. */
  | { t: 'broadcast'; name: string; msg: Uint8Array };

/** Engine → node. */
export type FromEngine =
  | { t: 'ready'; self: string; members: WireMember[] }
  | { t: 'failed'; error: WireError }
  /** A promise rejected with nobody to catch it (a bug): logged by the node, the engine goes on, as on the main thread. */
  | { t: 'unhandled'; error: WireError }
  /** The whole member list, sent when members disappeared without an event (dead ones forgotten). */
  | { t: 'members'; members: WireMember[] }
  | { t: 'event'; ev: 'join' | 'update' | 'leave'; member: WireMember }
  | { t: 'conflict'; member: WireMember; duringJoin: boolean }
  | { t: 'log'; level: LogLevel; msg: string; fields?: Record<string, unknown> }
  | { t: 'user'; buf: Uint8Array }
  | { t: 'remoteState'; buf: Uint8Array; join: boolean }
  | { t: 'reply'; id: number; value?: unknown; error?: WireError };

/** A copy that owns exactly its bytes (cheap to clone, safe to transfer). */
export function own(buf: Uint8Array): Uint8Array {
  return new Uint8Array(buf);
}

/** A Buffer over received bytes, without copying. */
export function bytes(u: Uint8Array): Buffer {
  return Buffer.isBuffer(u) ? u : Buffer.from(u.buffer, u.byteOffset, u.byteLength);
}

export function toWireMember(m: Member): WireMember {
  return { ...m, meta: own(m.meta) };
}

export function fromWireMember(m: WireMember): Member {
  return { ...m, meta: bytes(m.meta) };
}

export function toWireError(e: unknown): WireError {
  const err = e instanceof Error ? e : new Error(String(e));
  const code = (err as NodeJS.ErrnoException).code;
  return { name: err.name, message: err.message, ...(code !== undefined ? { code: String(code) } : {}), stack: err.stack };
}

/** An Error again, with its code (the node tells EADDRINUSE from other start failures by it). */
export function fromWireError(w: WireError): Error {
  const e = new Error(w.message) as NodeJS.ErrnoException;
  e.name = w.name;
  if (w.code !== undefined) e.code = w.code;
  if (w.stack) e.stack = w.stack;
  return e;
}

/** Log fields as plain data (a field structured cloning refuses is turned into its string). */
export function plainFields(fields: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(fields)) {
    out[k] = v === null || ['string', 'number', 'boolean', 'undefined'].includes(typeof v) ? v : String(v);
  }
  return out;
}
