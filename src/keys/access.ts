/**
 * Who is calling and what they may do (SPEC section 12, "Roles"): the key a
 * request presents, looked up in this node's plain keys and the mesh-wide
 * table; what each endpoint needs; and whether a key may use a model. Pure
 * except for hashing the presented key.
 *
 * The key check of the API lives here (`presentedKey`, `identify`); plain
 * keys of `api.keys_env` and a one-key-a-line `api.keys_file` are admin
 * keys of this node named `local`.
 */
import crypto from 'node:crypto';
import type http from 'node:http';
import { globMatch, type Limits, type Priority, type Role } from '../config/key-spec.ts';
import type { KeyTable } from './table.ts';

/** A caller with a key. Without any key configured there is no caller: everything is open, as before keys. */
export interface Caller {
  /** The key's name (`local` for a plain key of this node): what logs, metrics, usage and forwards carry. */
  name: string;
  role: Role;
  models: readonly string[];
  priority: Priority;
  weight: number;
  limits: Limits;
}

export const LOCAL_CALLER: Caller = { name: 'local', role: 'admin', models: ['*'], priority: 'interactive', weight: 1, limits: {} };

/** What an endpoint needs: nothing, any key, or an admin key. */
export type Need = 'open' | 'user' | 'admin';

// One space after the scheme, as today: "Bearer  k" and "Bearer k x" are not a key (test/mesh/client-keys.test.ts).
const BEARER = /^bearer (\S+)$/i;

/**
 * The key a request carries: `Authorization: Bearer <key>` (the scheme in any
 * case, RFC 9110 §11.1), or on the Messages API `x-api-key: <key>` too.
 */
export function presentedKey(headers: http.IncomingHttpHeaders, apiKeyHeader: boolean): string | undefined {
  const auth = headers.authorization;
  const m = typeof auth === 'string' ? BEARER.exec(auth) : null;
  if (m) return m[1];
  const x = apiKeyHeader ? headers['x-api-key'] : undefined;
  return typeof x === 'string' && x !== '' && !/\s/.test(x) ? x : undefined;
}

export const sha256Hex = (text: string): string => crypto.createHash('sha256').update(text).digest('hex');

/** The caller of this key: a live table key, else a plain key of this node, else undefined (refuse with 401). */
export function identify(key: string | undefined, table: Pick<KeyTable, 'byHash'>, localHashes: ReadonlySet<string>): Caller | undefined {
  if (key === undefined) return undefined;
  const sha = sha256Hex(key);
  const k = table.byHash(sha);
  if (k) return { name: k.name, role: k.role, models: k.models, priority: k.priority, weight: k.weight, limits: k.limits };
  return localHashes.has(sha) ? LOCAL_CALLER : undefined;
}

/**
 * The role table of docs/api.md. Inference, the model list and one's own
 * usage need a key; changing the fleet (load, unload, aliases, keys) and
 * seeing it whole (decisions, fleet capacity, members, others' usage) need
 * an admin key. /v1/capacity stays open to members' polls; the operations
 * pages are open unless `api.protect_ops`.
 */
export function needOf(method: string, pathname: string, protectOps: boolean): Need {
  if (pathname === '/v1/capacity') return 'open';
  if (pathname === '/health' || pathname === '/metrics' || pathname === '/' || pathname === '/node' || pathname.startsWith('/ui/')) return protectOps ? 'user' : 'open';
  const read = method === 'GET' || method === 'HEAD';
  if (pathname === '/v1/keys' || pathname.startsWith('/v1/keys/') || pathname === '/v1/drain') return 'admin';
  // The fleet seen whole: the decision feed, each request's timeline in it, the history of capacity, members.
  if (pathname === '/v1/decisions' || pathname === '/v1/fleet/capacity' || pathname === '/v1/mesh' || pathname === '/v1/history' || pathname.startsWith('/v1/timeline/')) return 'admin';
  if (pathname === '/v1/aliases' || pathname.startsWith('/v1/aliases/')) return read ? 'user' : 'admin';
  if (pathname.startsWith('/v1/models/') && /\/(load|unload)$/.test(pathname) && !read) return 'admin';
  return 'user';
}

/** May `caller` reach an endpoint that needs `need`? */
export const reaches = (caller: Caller, need: Need): boolean => need !== 'admin' || caller.role === 'admin';

/** May the caller use this model or alias name? */
export const allowsModel = (caller: Pick<Caller, 'models'>, name: string): boolean => caller.models.some((g) => globMatch(g, name));

/**
 * An alias as a scoped key sees it (SPEC 12: a user key learns nothing of
 * models outside its scope): none unless its name and target are both in
 * scope, and only the fallbacks in scope, the only ones it may run as
 * (issue 46: fallbacks outside the scope were listed). Every place that
 * shows or resolves an alias for a key goes through this.
 */
export function scopedAlias<A extends { target: string; fallbacks: readonly string[] }>(caller: Pick<Caller, 'models'>, name: string, alias: A): A | undefined {
  if (!allowsModel(caller, name) || !allowsModel(caller, alias.target)) return undefined;
  return alias.fallbacks.every((f) => allowsModel(caller, f)) ? alias : { ...alias, fallbacks: alias.fallbacks.filter((f) => allowsModel(caller, f)) };
}

/** The priority a request runs at: what it asked (header or body), never above its key's. */
export function effectivePriority(caller: Caller | undefined, asked: Priority | undefined): Priority {
  const ceiling = caller?.priority ?? 'interactive';
  return ceiling === 'batch' || asked === 'batch' ? 'batch' : 'interactive';
}

/**
 * The keys this node admits: its plain keys (admin, this node only) and the
 * mesh-wide table. Off (everything open, as before keys) while both are
 * empty.
 */
export class Keyring {
  readonly #local: Set<string>;
  /** Key name -> what to call when it is revoked: the requests of that key still waiting for a slot. */
  readonly #revocationWatch = new Map<string, Set<() => void>>();

  constructor(
    readonly table: KeyTable,
    plain: readonly string[],
  ) {
    this.#local = new Set(plain.map(sha256Hex));
    table.onChange((changed) => {
      for (const e of changed) {
        const fns = e.value === null ? this.#revocationWatch.get(e.name) : undefined;
        if (fns) for (const fn of [...fns]) fn();
      }
    });
  }

  /**
   * Call `fn` when the table key `name` is revoked here (by this node or by
   * gossip): a request admitted before its key was revoked is failed while it
   * still waits (issue 46: a batch key's queued work ran for minutes after
   * DELETE). Returns the way to stop watching.
   */
  onRevoked(name: string, fn: () => void): () => void {
    let fns = this.#revocationWatch.get(name);
    if (!fns) this.#revocationWatch.set(name, (fns = new Set()));
    fns.add(fn);
    return () => {
      fns.delete(fn);
      if (fns.size === 0 && this.#revocationWatch.get(name) === fns) this.#revocationWatch.delete(name);
    };
  }

  get enabled(): boolean {
    return this.#local.size > 0 || this.table.size > 0;
  }

  /** The caller of a request's key, or undefined when it carries none that is live. */
  caller(headers: http.IncomingHttpHeaders, apiKeyHeader: boolean): Caller | undefined {
    return identify(presentedKey(headers, apiKeyHeader), this.table, this.#local);
  }

  /**
   * The caller a verified forward names (its signed claim): a live table key,
   * or `local` (a plain key of the entry); `revoked` when this node holds a
   * tombstone for it. A name this node has not heard of yet (a key added a
   * moment ago elsewhere) is the entry's word: the member vouches for it, with
   * the scope it checked.
   */
  named(name: string): Caller | 'revoked' {
    if (name === LOCAL_CALLER.name) return Object.assign({}, LOCAL_CALLER, { role: 'user' as const });
    const e = this.table.entry(name);
    if (!e) return Object.assign({}, LOCAL_CALLER, { name, role: 'user' as const });
    if (!e.value) return 'revoked';
    const k = e.value;
    return { name, role: k.role, models: k.models, priority: k.priority, weight: k.weight, limits: k.limits };
  }
}
