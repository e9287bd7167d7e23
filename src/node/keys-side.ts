/**
 * The keys' side of this node (SPEC section 12), assembled: the key ring
 * (plain keys and the mesh-wide table), the table's pull from members, the
 * limits' half held here, and the usage book; and where a run's usage goes:
 * the hourly rollups, the per-key metrics, and the settlement keys/settle.ts
 * works out, applied to the key's limits. Wiring only.
 */
import type { RoutedRequest } from '../dispatch/types.ts';
import type { ServedUsage } from '../dispatch/ports.ts';
import { postToMember, type MemberLink } from '../forward/member-call.ts';
import { Keyring } from '../keys/access.ts';
import { Limiter } from '../keys/limiter.ts';
import { LIMITS_PATH } from '../api/limits.ts';
import { KEY_TABLE_PATH } from '../api/keys.ts';
import { requireClientKeys } from '../config/keys.ts';
import type { Config } from '../config/schema.ts';
import type { PeerLink } from '../forward/send.ts';
import { settlement } from '../keys/settle.ts';
import { KeySync } from '../keys/sync.ts';
import { KeyTable } from '../keys/table.ts';
import { UsageBook, type ServedRecord } from '../keys/usage.ts';
import { limitOwners, type MemberTable } from '../mesh/members.ts';
import type { Metrics } from '../metrics/metrics.ts';

export interface UsageSide {
  readonly keys: Keyring;
  readonly limiter: Limiter;
  readonly usage: UsageBook;
  readonly metrics: Metrics;
}

export interface KeySide {
  readonly keys: Keyring;
  readonly limiter: Limiter;
  readonly usage: UsageBook;
  /** Pulls a member's key table when its key_digest is not ours (keys/sync.ts). */
  readonly keySync: KeySync;
}

/** Made from the node's config, members and clock; `link` calls members. */
export function keySide(n: { readonly name: string; readonly config: Config; readonly now: () => number; readonly members: MemberTable; readonly log: { warn(msg: string): void } }, link: PeerLink, env: NodeJS.ProcessEnv): KeySide {
  const stateDir = n.config.node.state_dir;
  const warn = (msg: string) => n.log.warn(msg);
  const read = requireClientKeys(n.config.api, env);
  // A keys file seeds the table (names the mesh has never seen); the table kept in state_dir and the mesh win.
  const keys = new Keyring(KeyTable.load(stateDir, { log: warn, now: n.now }), read.keys);
  keys.table.seed(read.table);
  return {
    keys,
    keySync: keySyncOver(keys.table, link, n.now),
    limiter: limiterOver(n.name, n.members, link, n.now, stateDir, warn),
    usage: UsageBook.load(n.name, n.now, stateDir, warn),
  };
}

/** The key table's anti-entropy (keys/sync.ts): a member's whole table, pulled over a signed member call. */
export function keySyncOver(table: KeyTable, link: PeerLink, now: () => number): KeySync {
  return new KeySync({
    table,
    now,
    pull: async (host) => {
      const r = await postToMember(link, host, KEY_TABLE_PATH, {}, 5000);
      const entries = r.status === 200 ? (r.body as { entries?: unknown } | undefined)?.entries : undefined;
      return Array.isArray(entries) ? entries : undefined;
    },
  });
}

/** The key limits' half on this node (keys/limiter.ts): owners among this node and its peers, reports over signed member calls. */
export function limiterOver(self: string, members: MemberTable, link: MemberLink, now: () => number, stateDir: string, log: (msg: string) => void): Limiter {
  return new Limiter({
    self,
    now,
    alive: () => limitOwners(self, members.peers()),
    send: async (host, reports) => {
      const r = await postToMember(link, host, LIMITS_PATH, { reports }, 1000);
      return r.status === 200 ? (r.body as { views?: Record<string, never> }).views : undefined;
    },
    stateDir,
    log,
  });
}

/** One request's usage here: the hourly rollups and the per-key metrics. */
export function recordUsage(n: UsageSide, r: ServedRecord): void {
  n.usage.record(r);
  n.metrics.keyRequests.inc({ key: r.key, model: r.model, outcome: r.outcome });
  if (r.promptCached) n.metrics.keyTokens.inc({ key: r.key, model: r.model, kind: 'prompt_cached' }, r.promptCached);
  if (r.promptUncached) n.metrics.keyTokens.inc({ key: r.key, model: r.model, kind: 'prompt_uncached' }, r.promptUncached);
  if (r.completion) n.metrics.keyTokens.inc({ key: r.key, model: r.model, kind: 'completion' }, r.completion);
}

/** A local run ended with the engine's answer: its usage recorded, and the key's tokens settled against what admission held back (keys/settle.ts). */
export function settleServed(n: UsageSide, rr: RoutedRequest, used: ServedUsage): void {
  const s = settlement(rr, used, n.keys.enabled);
  if (s.record) recordUsage(n, s.record);
  if (s.settle) n.limiter.settle(s.settle.key, s.settle.tokens, s.settle.at);
}
