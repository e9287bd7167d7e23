/**
 * Client keys (api.keys_env, api.keys_file; off when neither is set): which
 * requests need `Authorization: Bearer <key>` at the entry node, and the
 * constant-time check. Forwards between members are authenticated by the
 * mesh instead; /v1/capacity stays open to members' polls.
 */
import crypto from 'node:crypto';
import type http from 'node:http';

export type Protection = 'open' | 'key';

/** What a path needs. `ops` is api.protect_ops. */
export function protectionOf(path: string, protectOps: boolean): Protection {
  if (path === '/v1/capacity') return 'open';
  if (path === '/health' || path === '/metrics' || path === '/' || path === '/node' || path.startsWith('/ui/')) return protectOps ? 'key' : 'open';
  return 'key';
}

export class ClientKeys {
  readonly #digests: Buffer[];

  constructor(keys: readonly string[]) {
    // Compared as SHA-256 digests: equal lengths for timingSafeEqual, and no key kept in the clear.
    this.#digests = keys.map((k) => crypto.createHash('sha256').update(k).digest());
  }

  get enabled(): boolean {
    return this.#digests.length > 0;
  }

  /**
   * Does the request carry one of the keys? Every key is compared, so the time does not say which one was
   * close. `apiKeyHeader`: the key may also come as `x-api-key` (Anthropic's SDKs send it so on the Messages API).
   */
  admits(req: http.IncomingMessage, apiKeyHeader = false): boolean {
    const auth = req.headers.authorization;
    const m = typeof auth === 'string' ? /^Bearer (.+)$/.exec(auth) : null;
    const xKey = apiKeyHeader ? req.headers['x-api-key'] : undefined;
    const key = m ? m[1] : typeof xKey === 'string' && xKey !== '' ? xKey : undefined;
    if (key === undefined) return false;
    const d = crypto.createHash('sha256').update(key).digest();
    let ok = false;
    for (const k of this.#digests) ok = crypto.timingSafeEqual(d, k) || ok;
    return ok;
  }
}
