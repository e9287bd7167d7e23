/**
 * Signed forwards in a secured mesh (SPEC section 6).
 *
 * Key: for each mesh secret (the raw 32 bytes that also key gossip
 * encryption), a separate 32-byte HMAC key is derived with
 * HKDF-SHA256(ikm = secret, salt = SIGNING_SALT, info = SIGNING_INFO), so the
 * gossip key itself never signs anything.
 *
 * Canonical string (UTF-8, fields joined by a single "\n", no trailing
 * newline), version 2:
 *
 *     viiwork-forward-v2
 *     <METHOD, uppercase>
 *     <path with query, exactly as sent on the request line>
 *     <X-Viiwork-Ts: unix milliseconds, decimal>
 *     <X-Viiwork-Nonce: 32 lowercase hex>
 *     <X-Viiwork-Node: sender node name>
 *     <receiving node name>
 *     <SHA-256 of the body, 64 lowercase hex; of zero bytes when empty>
 *
 * Version 3 (viiwork 0.3.0 on) signs a forward that carries claims
 * (claims.ts): the same lines with the tag `viiwork-forward-v3`, then one
 * more, the `X-Viiwork-Claims` header exactly as sent (empty when absent).
 * A forward without claims is still signed v2, which v3 extends by that
 * line alone: a v2 signature vouches for a request with no claims, and a
 * claims header beside a v1 or v2 signature is refused, so no claim can be
 * added to a signed forward on its way. A sender signs v3 only to members
 * whose reported version is 0.3.0 or later (older ones know no claims, and
 * get the forward without them).
 *
 * Version 1 (viiwork before 0.2.0) is the same as v2 without the receiver
 * line and with the tag `viiwork-forward-v1`; it is accepted only from
 * members whose reported version predates 0.2.0, so a rolling upgrade keeps
 * working and a captured v2 forward cannot be replayed to another member.
 *
 * None of the fields can contain "\n" (a request line cannot, and the
 * verifier checks the header formats first), so the join is unambiguous.
 * `X-Viiwork-Auth` = `v2=` (or `v3=`) + hex(HMAC-SHA256(key, canonical string)).
 *
 * A verifier accepts a timestamp at most 120 s away from its own clock,
 * each nonce once (nonces are remembered for 240 s, the longest time a
 * timestamp can stay acceptable), and a MAC made with the primary or the
 * previous secret (rotation).
 */
import crypto from 'node:crypto';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { Transform, type TransformCallback } from 'node:stream';
import { NODE_NAME } from '../config/schema.ts';
import { HEADER_CLAIMS } from './claims.ts';
import {
  FORWARD_HEADERS,
  HEADER_AUTH,
  HEADER_NODE,
  HEADER_NONCE,
  HEADER_TS,
  classifyForwardHeaders,
  headerValue,
  type HeaderBag,
} from './headers.ts';

/**
 * Version tag: prefix of the MAC header. v2 (viiwork 0.2.0 on) names the
 * receiving node in the canonical string, so a forward captured on its way
 * to one member cannot be replayed to another. v1 (no receiver) is accepted
 * only from members whose reported version predates v2 (a rolling upgrade).
 */
export const SIGNING_VERSION = 'v2';
const CANONICAL_TAGS = { v1: 'viiwork-forward-v1', v2: 'viiwork-forward-v2', v3: 'viiwork-forward-v3' } as const;
/** The first viiwork version that signs v2. */
export const SIGNING_V2_SINCE = '0.2.0';
/** The first viiwork version that reads claims (signature v3). */
export const SIGNING_V3_SINCE = '0.3.0';
/** HKDF salt for the request-signing key. Changing it breaks every mixed-version mesh. */
export const SIGNING_SALT = 'viiwork/v2 request-signing salt';
/** HKDF info for the request-signing key. */
export const SIGNING_INFO = 'viiwork/v2 hmac-sha256 forward key';
/** Largest accepted difference between a request's timestamp and our clock. */
export const MAX_SKEW_MS = 120_000;
/** How long a nonce is remembered: a timestamp up to MAX_SKEW_MS ahead stays valid for twice that. */
export const NONCE_TTL_MS = 2 * MAX_SKEW_MS;
/** Default bound on remembered nonces (about 270 forwards a second over the window). */
export const DEFAULT_MAX_NONCES = 65_536;

/** SHA-256 of zero bytes, the body hash of a request without a body. */
export const EMPTY_BODY_SHA256 = crypto.createHash('sha256').digest('hex');

const TS_FORMAT = /^\d{1,16}$/;
const NONCE_FORMAT = /^[0-9a-f]{32}$/;
const AUTH_FORMAT = /^(v1|v2|v3)=([0-9a-f]{64})$/;
const SHA256_FORMAT = /^[0-9a-f]{64}$/;

/** The HMAC key for one mesh secret. Not the gossip key: derived by HKDF. */
export function deriveSigningKey(secret: Buffer): Buffer {
  return Buffer.from(crypto.hkdfSync('sha256', secret, SIGNING_SALT, SIGNING_INFO, 32));
}

/** SHA-256 hex of a whole body held in memory. */
export function sha256Hex(body: Buffer | Uint8Array | string): string {
  return crypto.createHash('sha256').update(body).digest('hex');
}

/** Bodies above this are hashed a slice at a time, yielding to the event loop between slices. */
const SLICE = 256 * 1024;

/**
 * SHA-256 hex of a body; a large one is hashed without holding the event
 * loop. Not WebCrypto: its digest copies the whole body before going to the
 * thread pool, and that copy of a 30 MiB body alone stalls the loop.
 */
export async function sha256HexAsync(body: Buffer): Promise<string> {
  if (body.length <= SLICE) return sha256Hex(body);
  const h = crypto.createHash('sha256');
  for (let at = 0; at < body.length; at += SLICE) {
    h.update(body.subarray(at, at + SLICE));
    await nextTurn();
  }
  return h.digest('hex');
}

/**
 * A pass-through stream that hashes what flows through it, for bodies that
 * are not buffered (multipart uploads): pipe the body through it, then read
 * `digestHex()` after it ended.
 */
export class HashingPassThrough extends Transform {
  #hash = crypto.createHash('sha256');
  #digest: string | undefined;
  bytes = 0;

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    this.#hash.update(chunk);
    this.bytes += chunk.length;
    cb(null, chunk);
  }

  /** The hex digest; only meaningful once the stream has ended. */
  digestHex(): string {
    this.#digest ??= this.#hash.digest('hex');
    return this.#digest;
  }
}

export interface SignableRequest {
  method: string;
  /** Path and query exactly as on the request line, e.g. `/v1/chat/completions?host=a`. */
  pathWithQuery: string;
  /** Sender node name (this node). */
  node: string;
  /** SHA-256 hex of the body that will be sent (EMPTY_BODY_SHA256 for none). */
  bodySha256: string;
  /** Receiving node name (v2). Absent: a v1 signature (for tests of the upgrade rule only). */
  to?: string;
  /** The `X-Viiwork-Claims` value the forward carries (claims.ts): signed v3. Needs `to`. */
  claims?: string;
}

/** The canonical string that is MACed; exported for tests and docs. */
export function canonicalString(req: SignableRequest & { ts: string; nonce: string }): string {
  const head = [req.method.toUpperCase(), req.pathWithQuery, req.ts, req.nonce, req.node];
  if (req.to === undefined) return [CANONICAL_TAGS.v1, ...head, req.bodySha256.toLowerCase()].join('\n');
  if (req.claims === undefined) return [CANONICAL_TAGS.v2, ...head, req.to, req.bodySha256.toLowerCase()].join('\n');
  return [CANONICAL_TAGS.v3, ...head, req.to, req.bodySha256.toLowerCase(), req.claims].join('\n');
}

function mac(key: Buffer, text: string): Buffer {
  return crypto.createHmac('sha256', key).update(text, 'utf8').digest();
}

/** The four headers of a signed forward, with their canonical (capitalised) names, and its claims when it carries any. */
export interface SignedHeaders {
  'X-Viiwork-Node': string;
  'X-Viiwork-Ts': string;
  'X-Viiwork-Nonce': string;
  'X-Viiwork-Auth': string;
  'X-Viiwork-Claims'?: string;
}

/**
 * Sign one forward with an HMAC key from `deriveSigningKey`. `now` (unix ms)
 * defaults to the wall clock; `nonce` (32 hex) to 16 random bytes and
 * exists for tests only.
 */
export function signRequest(key: Buffer, req: SignableRequest & { now?: number; nonce?: string }): SignedHeaders {
  const ts = String(Math.floor(req.now ?? Date.now()));
  const nonce = req.nonce ?? crypto.randomBytes(16).toString('hex');
  if (req.claims !== undefined && req.to === undefined) throw new Error('claims are signed v3, which names the receiver');
  const text = canonicalString(Object.assign({}, req, { ts, nonce }));
  const version = req.to === undefined ? 'v1' : req.claims === undefined ? 'v2' : 'v3';
  const headers: SignedHeaders = {
    'X-Viiwork-Node': req.node,
    'X-Viiwork-Ts': ts,
    'X-Viiwork-Nonce': nonce,
    'X-Viiwork-Auth': `${version}=${mac(key, text).toString('hex')}`,
  };
  if (req.claims !== undefined) headers['X-Viiwork-Claims'] = req.claims;
  return headers;
}

/** Signs with the primary secret's derived key. */
export class RequestSigner {
  readonly #key: Buffer;
  readonly #now: () => number;

  constructor(secret: Buffer, opts: { now?: () => number } = {}) {
    this.#key = deriveSigningKey(secret);
    this.#now = opts.now ?? Date.now;
  }

  sign(req: SignableRequest & { now?: number }): SignedHeaders {
    return signRequest(this.#key, Object.assign({}, req, { now: req.now ?? this.#now() }));
  }
}

export interface VerifyInput {
  method: string;
  pathWithQuery: string;
  /** SHA-256 hex of the body as received (computed while reading it). */
  bodySha256: string;
  headers: HeaderBag;
  /** This node's name: a v2 signature must name it as the receiver. */
  self?: string;
  /** Whether a v1 signature (no receiver) is acceptable from this sender: its reported version predates v2. */
  acceptV1?: (node: string) => boolean;
}

/** Does a reported version (major.minor.patch) predate `since`? Unknown or malformed versions do not. */
export function versionBefore(ver: string | undefined, since: string): boolean {
  const a = ver === undefined ? undefined : parsedVersion(ver);
  const b = parsedVersion(since)!;
  if (!a) return false;
  for (let i = 0; i < 3; i++) if (a[i] !== b[i]) return a[i] < b[i];
  return false;
}

/** Versions read so far (a mesh reports a handful): each forward asks of its member's, so none is parsed twice. */
const VERSIONS = new Map<string, readonly number[] | undefined>();
const VERSIONS_MAX = 256;

function parsedVersion(v: string): readonly number[] | undefined {
  if (VERSIONS.has(v)) return VERSIONS.get(v);
  const parsed = /^(\d+)\.(\d+)\.(\d+)/.exec(v)?.slice(1).map(Number);
  if (VERSIONS.size >= VERSIONS_MAX) VERSIONS.clear();
  VERSIONS.set(v, parsed);
  return parsed;
}

/** `claims`: the `X-Viiwork-Claims` value a v3 signature covers, when the forward carries one. */
export type VerifyResult = { ok: true; node: string; ts: number; claims?: string } | { ok: false; reason: string };

export interface VerifierOptions {
  /** Raw mesh secrets, primary first; a MAC with any of them is accepted. */
  secrets: Buffer[];
  /** Clock, unix ms. Default Date.now. */
  now?: () => number;
  /** Bound on remembered nonces. Default DEFAULT_MAX_NONCES. */
  maxNonces?: number;
}

/**
 * Nonces seen within the last NONCE_TTL_MS, in arrival order. Bounded:
 * when full, the oldest entry is dropped early and its timestamp becomes a
 * floor below which every request is refused, so forgetting a nonce never
 * lets its request be replayed.
 */
class NonceCache {
  readonly #seen = new Map<string, { expires: number; ts: number }>();
  #floorTs = -Infinity;

  constructor(readonly max: number) {}

  get size(): number {
    return this.#seen.size;
  }

  get floorTs(): number {
    return this.#floorTs;
  }

  #evictExpired(now: number): void {
    for (const [nonce, e] of this.#seen) {
      if (e.expires > now) break;
      this.#seen.delete(nonce);
    }
  }

  has(nonce: string, now: number): boolean {
    this.#evictExpired(now);
    return this.#seen.has(nonce);
  }

  add(nonce: string, ts: number, now: number): void {
    this.#evictExpired(now);
    while (this.#seen.size >= this.max) {
      const oldest = this.#seen.entries().next().value;
      if (!oldest) break;
      this.#seen.delete(oldest[0]);
      this.#floorTs = Math.max(this.#floorTs, oldest[1].ts);
    }
    this.#seen.set(nonce, { expires: now + NONCE_TTL_MS, ts });
  }
}

function single(headers: HeaderBag, name: string): string | undefined {
  const v = headerValue(headers, name);
  return typeof v === 'string' ? v : undefined;
}

/**
 * Checks signed forwards. One instance per node: it holds the nonce cache.
 * `verify` never throws; a rejection carries a reason for the 401 body and
 * the log.
 */
export class RequestVerifier {
  readonly #keys: Buffer[];
  readonly #now: () => number;
  readonly #nonces: NonceCache;

  constructor(opts: VerifierOptions) {
    if (opts.secrets.length === 0) throw new Error('RequestVerifier needs at least one secret');
    this.#keys = opts.secrets.map(deriveSigningKey);
    this.#now = opts.now ?? Date.now;
    this.#nonces = new NonceCache(Math.max(1, opts.maxNonces ?? DEFAULT_MAX_NONCES));
  }

  /** Nonces currently remembered (for tests and metrics). */
  get nonceCount(): number {
    return this.#nonces.size;
  }

  verify(input: VerifyInput): VerifyResult {
    const set = classifyForwardHeaders(input.headers);
    if (set === 'none') return { ok: false, reason: 'not a signed forward: no X-Viiwork-Node, -Ts, -Nonce, -Auth headers' };
    if (set === 'partial') {
      const missing = FORWARD_HEADERS.filter((h) => headerValue(input.headers, h) === undefined);
      return { ok: false, reason: `incomplete forward headers: missing ${missing.join(', ')}` };
    }
    const node = single(input.headers, HEADER_NODE);
    const tsText = single(input.headers, HEADER_TS);
    const nonce = single(input.headers, HEADER_NONCE);
    const auth = single(input.headers, HEADER_AUTH);
    if (node === undefined || tsText === undefined || nonce === undefined || auth === undefined) {
      return { ok: false, reason: 'forward headers repeated' };
    }
    if (!NODE_NAME.test(node)) return { ok: false, reason: 'malformed X-Viiwork-Node' };
    if (!TS_FORMAT.test(tsText)) return { ok: false, reason: 'malformed X-Viiwork-Ts (expected unix milliseconds)' };
    if (!NONCE_FORMAT.test(nonce)) return { ok: false, reason: 'malformed X-Viiwork-Nonce (expected 32 lowercase hex)' };
    const authMatch = AUTH_FORMAT.exec(auth);
    if (!authMatch) return { ok: false, reason: 'malformed X-Viiwork-Auth (expected v2=<64 hex>)' };
    const version = authMatch[1] as 'v1' | 'v2' | 'v3';
    if (version === 'v1' && !input.acceptV1?.(node)) {
      return { ok: false, reason: `signature v1 (no receiver) from a member that signs ${SIGNING_VERSION}: upgrade-only fallback refused` };
    }
    const claimsValue = headerValue(input.headers, HEADER_CLAIMS);
    if (Array.isArray(claimsValue)) return { ok: false, reason: 'forward headers repeated' };
    if (claimsValue !== undefined && version !== 'v3') return { ok: false, reason: `X-Viiwork-Claims outside the signature (a ${version} signature does not cover it)` };
    if (!SHA256_FORMAT.test(input.bodySha256)) return { ok: false, reason: 'body hash is not SHA-256 hex' };

    const now = this.#now();
    const ts = Number(tsText);
    if (Math.abs(now - ts) > MAX_SKEW_MS) {
      return { ok: false, reason: `timestamp ${Math.round((ts - now) / 1000)} s off this node's clock (at most ${MAX_SKEW_MS / 1000} s)` };
    }

    const text = canonicalString({
      method: input.method,
      pathWithQuery: input.pathWithQuery,
      node,
      bodySha256: input.bodySha256,
      ts: tsText,
      nonce,
      to: version === 'v1' ? undefined : input.self,
      claims: version === 'v3' ? (claimsValue ?? '') : undefined,
    });
    const given = Buffer.from(authMatch[2], 'hex');
    let good = false;
    for (const key of this.#keys) {
      // Every key is tried, so timing does not reveal which one matched.
      if (crypto.timingSafeEqual(mac(key, text), given)) good = true;
    }
    if (!good) return { ok: false, reason: 'bad signature' };

    // Nonces are recorded only after the MAC holds, so forgeries cannot fill the cache.
    if (this.#nonces.has(nonce, now)) return { ok: false, reason: 'nonce seen before (replay)' };
    if (ts <= this.#nonces.floorTs) return { ok: false, reason: 'timestamp older than the replay window can vouch for (nonce cache full)' };
    this.#nonces.add(nonce, ts, now);
    return claimsValue !== undefined ? { ok: true, node, ts, claims: claimsValue } : { ok: true, node, ts };
  }
}
