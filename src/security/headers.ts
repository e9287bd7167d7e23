/**
 * The `X-Viiwork-*` request headers of a forward between nodes (SPEC
 * section 6), how complete a set a request carries, and their removal once
 * the API has judged them.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { HEADER_CLAIMS } from './claims.ts';
import type { MeshMode } from './secret.ts';

/** The sender's node name. Alone, it is an open-mesh forward claim. */
export const HEADER_NODE = 'x-viiwork-node';
/** The signing time, unix milliseconds as a decimal integer. */
export const HEADER_TS = 'x-viiwork-ts';
/** 16 random bytes, 32 lowercase hex characters, never reused. */
export const HEADER_NONCE = 'x-viiwork-nonce';
/** `v1=<64 lowercase hex>`: HMAC-SHA256 of the canonical string. */
export const HEADER_AUTH = 'x-viiwork-auth';
/** A client's preference list; the only `X-Viiwork-*` header that survives. */
export const HEADER_PREFER = 'x-viiwork-prefer';

/** The four headers of a signed forward, all or none. */
export const FORWARD_HEADERS = [HEADER_NODE, HEADER_TS, HEADER_NONCE, HEADER_AUTH] as const;

/** Headers as node:http gives them (lowercase keys), or any plain record. */
export type HeaderBag = IncomingHttpHeaders | Record<string, string | string[] | undefined>;

/** The value of a header, looked up case-insensitively; undefined when absent. */
export function headerValue(headers: HeaderBag, name: string): string | string[] | undefined {
  const direct = headers[name];
  if (direct !== undefined) return direct;
  // node:http's names are lower case already: this pass (allocating nothing) is for records of any case.
  const lower = name.toLowerCase();
  for (const k in headers) {
    const v = headers[k];
    if (v !== undefined && k.length === lower.length && k.toLowerCase() === lower) return v;
  }
  return undefined;
}

/**
 * How many of the four forward headers a request carries:
 * `none` (a client request), `complete` (all four: verify it), `partial`
 * (some: 401 in a secured mesh). An open-mesh forward carries
 * `X-Viiwork-Node` alone and is therefore `partial`; the API decides what
 * that means in its mode.
 */
export type ForwardHeaderSet = 'none' | 'partial' | 'complete';

export function classifyForwardHeaders(headers: HeaderBag): ForwardHeaderSet {
  // A client request carries no x-viiwork-* header: one pass over the names, allocating nothing, says so.
  if (!hasMeshHeader(headers)) return 'none';
  let present = 0;
  for (const name of FORWARD_HEADERS) if (headerValue(headers, name) !== undefined) present++;
  if (present === 0) return 'none';
  return present === FORWARD_HEADERS.length ? 'complete' : 'partial';
}

/** Does any header name start with `x-viiwork-` (any case)? */
function hasMeshHeader(headers: HeaderBag): boolean {
  for (const k in headers) if (isMeshName(k)) return true;
  return false;
}

/** Does a header name start with `x-viiwork-` in any case? Compared by character, so no name is copied to lower case. */
function isMeshName(k: string): boolean {
  if (k.length < MESH_PREFIX.length) return false;
  for (let i = 0; i < MESH_PREFIX.length; i++) {
    const c = k.charCodeAt(i);
    // ASCII letters compare with their lower case (| 0x20); '-' compares as itself.
    if ((c >= 0x41 && c <= 0x5a ? c | 0x20 : c) !== MESH_PREFIX.charCodeAt(i)) return false;
  }
  return true;
}

const MESH_PREFIX = 'x-viiwork-';

/**
 * Remove every `x-viiwork-*` header except `x-viiwork-prefer` from `headers`
 * itself (no copy), so neither a client's smuggled claim nor a verified one
 * reaches an engine or the next hop.
 */
export function removeMeshHeaders(headers: HeaderBag): void {
  for (const k in headers) {
    // Set to undefined, not deleted: a deletion turns node:http's header object into a slow dictionary for the rest of the
    // request (every reader here takes undefined for absent, as node:http itself does).
    if (isMeshName(k) && k.toLowerCase() !== HEADER_PREFER) (headers as Record<string, unknown>)[k] = undefined;
  }
}

/**
 * Headers that make a request one from member `self` to member `to`: signed in a secured mesh, the name alone in an
 * open one; with `claims` (claims.ts, encoded), those too (signed v3 in a secured mesh).
 */
export function memberHeaders(mode: MeshMode, self: string, method: string, pathWithQuery: string, bodySha256: string, to: string, claims?: string): Record<string, string> {
  if (mode.mode === 'open') return claims === undefined ? { [HEADER_NODE]: self } : { [HEADER_NODE]: self, [HEADER_CLAIMS]: claims };
  return { ...mode.signer.sign({ method, pathWithQuery, node: self, to, bodySha256, claims }) };
}
