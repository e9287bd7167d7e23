/**
 * Operator warnings about what peers send us, rate-limited per kind and peer
 * host (streams arrive from ephemeral ports, so the port is left out).
 *
 * Kinds (the `kind` field of the log line, level 'warn'):
 * - `label`: a packet or stream carried another label than ours (or none),
 *   or a peer we dialled closed the stream without an answer while we send
 *   a label (what a peer with another label does);
 * - `encryption`: both sides encrypt but no installed key fits;
 * - `mode`: one side encrypts and the other does not;
 * - `oversize`: a compressed message that would expand beyond the cap, or
 *   a stream that would exceed its byte limit;
 * - `malformed`: an alive or push-pull entry we refused to store or relay
 *   (short `Vsn`, empty or unroutable address, bad port, bad name).
 *
 * The first occurrence is logged at once; repeats within `intervalMs` are
 * counted and reported (`suppressed`) with the next line that gets through.
 */
import { Clock } from './clock.ts';

export type WarningKind = 'label' | 'encryption' | 'mode' | 'oversize' | 'malformed';

/** Default spacing of two warnings of one kind about one peer host. */
export const WARN_INTERVAL_MS = 60_000;

/** Keys remembered at most (an attacker spoofing many sources cannot grow the map without bound). */
const MAX_KEYS = 4096;

export class WarnLimiter {
  private readonly seen = new Map<string, { at: number; suppressed: number }>();

  constructor(
    private readonly clock: Clock,
    private readonly intervalMs = WARN_INTERVAL_MS,
  ) {}

  /**
   * Whether a warning of `kind` about `peerHost` may be logged now; when it
   * may, how many were suppressed since the last one.
   */
  allow(kind: WarningKind, peerHost: string): { suppressed: number } | null {
    const key = `${kind} ${peerHost}`;
    const now = this.clock.now();
    const s = this.seen.get(key);
    if (s && now - s.at < this.intervalMs) {
      s.suppressed++;
      return null;
    }
    const suppressed = s?.suppressed ?? 0;
    this.seen.delete(key);
    if (this.seen.size >= MAX_KEYS) {
      // forget the oldest entry (Map keeps insertion order)
      const oldest = this.seen.keys().next().value;
      if (oldest !== undefined) this.seen.delete(oldest);
    }
    this.seen.set(key, { at: now, suppressed: 0 });
    return { suppressed };
  }
}

/** "1.2.3.4:5678" → "1.2.3.4", "[::1]:5678" → "::1". */
export function hostOf(addr: string): string {
  const m = /^\[(.*)\]:\d+$/.exec(addr) ?? /^(.*):\d+$/.exec(addr);
  return m ? m[1] : addr;
}
