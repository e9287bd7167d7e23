/**
 * What one node admitted for one key (SPEC section 12, limits): requests
 * and tokens over the last minute (one-second buckets covering the last 60 s, a sliding
 * window), tokens of the current UTC day, and requests in flight. Plain
 * data with pure updates, so it can be reported, summed by the owner and
 * saved in state_dir as it is.
 */

export const WINDOW_S = 60;
/**
 * Buckets in the ring: the minute's 60 and the one it is entering. A bucket counts while any part of its second lies
 * in the last 60 s (seconds s-60..s), so what was admitted late in a second still counts until a full minute after it:
 * with 60 buckets a burst at 12:00:00.9 left the window at 12:01:00.0 and the key was admitted again within one
 * real minute of it (the limits benchmark's first minute overshot by that burst).
 */
const SLOTS = WINDOW_S + 1;
const slotOf = (s: number): number => s % SLOTS;
/** Is a bucket stamped with second `stamp` part of the minute ending in second `s`? */
const inMinute = (stamp: number, s: number): boolean => stamp > s - SLOTS && stamp <= s;
export const DAY_MS = 86_400_000;

/** A sliding minute: `stamps[i]` is the second whose count `counts[i]` holds. */
export interface Minute {
  stamps: number[];
  counts: number[];
}

export const emptyMinute = (): Minute => ({ stamps: new Array(SLOTS).fill(-1), counts: new Array(SLOTS).fill(0) });

/** Add `n` (may be negative: a settlement) at clock `nowMs`. */
export function addTo(m: Minute, nowMs: number, n: number): void {
  const s = Math.floor(nowMs / 1000);
  const i = slotOf(s);
  if (m.stamps[i] !== s) {
    m.stamps[i] = s;
    m.counts[i] = 0;
  }
  m.counts[i] += n;
}

/**
 * The total of the seconds that overlap the last 60 s at `nowMs`; `signed`
 * keeps a negative total (a node that settles forwards another entry
 * admitted counts only their differences, often below zero), else at least 0.
 */
export function minuteTotal(m: Minute, nowMs: number, signed = false): number {
  const s = Math.floor(nowMs / 1000);
  let t = 0;
  for (let i = 0; i < SLOTS; i++) if (inMinute(m.stamps[i], s)) t += m.counts[i];
  return signed ? t : Math.max(0, t);
}

/** One key at one node. */
export interface KeyWindow {
  requests: Minute;
  tokens: Minute;
  /** The UTC day (ms since the epoch ÷ DAY_MS) `dayTokens` counts. */
  day: number;
  dayTokens: number;
  inflight: number;
}

export const emptyWindow = (nowMs: number): KeyWindow => ({ requests: emptyMinute(), tokens: emptyMinute(), day: Math.floor(nowMs / DAY_MS), dayTokens: 0, inflight: 0 });

/**
 * Count a settlement's difference in the second `atMs` (no later than `nowMs`) of the minute, and in the day:
 * a second that has left the minute takes nothing there (its estimate has left it too).
 */
export function addTokensAt(w: KeyWindow, atMs: number, nowMs: number, n: number): void {
  const s = Math.floor(Math.min(atMs, nowMs) / 1000);
  if (inMinute(s, Math.floor(nowMs / 1000))) addTo(w.tokens, s * 1000, n);
  const day = Math.floor(nowMs / DAY_MS);
  if (day !== w.day) {
    w.day = day;
    w.dayTokens = 0;
  }
  // Signed, as the minute: a settlement of a forward another entry admitted is only its difference. A settlement of a
  // request admitted before midnight stays in that day (gone by now), so it cannot take from today's count.
  if (Math.floor(Math.min(atMs, nowMs) / DAY_MS) === day) w.dayTokens += n;
}

/** Count tokens (admitted, or a settlement's difference) at `nowMs`, in the minute and the day. */
export function addTokens(w: KeyWindow, nowMs: number, n: number): void {
  addTokensAt(w, nowMs, nowMs, n);
}

/**
 * Undo one admission made at `atMs` (a request and its tokens) at `nowMs`:
 * out of the second it was counted in while the minute still holds that
 * second, and out of the day while it is the same day. What has left the
 * window is not taken again.
 */
export function takeBack(w: KeyWindow, atMs: number, tokens: number, nowMs: number): void {
  const s = Math.floor(atMs / 1000);
  if (inMinute(s, Math.floor(nowMs / 1000))) {
    const i = slotOf(s);
    if (w.requests.stamps[i] === s) w.requests.counts[i] -= 1;
    if (w.tokens.stamps[i] === s) w.tokens.counts[i] -= tokens;
  }
  if (w.day === Math.floor(atMs / DAY_MS)) w.dayTokens -= tokens;
}

/** What a node reports of a key to its owner: totals, so a report lost or repeated changes nothing, and a new owner rebuilds at once. */
export interface Totals {
  rpm: number;
  tpm: number;
  day: number;
  /** The UTC day `day` counts. */
  dayOf: number;
  concurrent: number;
}

/** `signed`: tokens as counted here, below zero included (a report to the owner, which sums every entry's); else at least 0. */
export function totalsOf(w: KeyWindow, nowMs: number, signed = false): Totals {
  const day = Math.floor(nowMs / DAY_MS);
  const dayTokens = w.day === day ? w.dayTokens : 0;
  return { rpm: minuteTotal(w.requests, nowMs), tpm: minuteTotal(w.tokens, nowMs, signed), day: signed ? dayTokens : Math.max(0, dayTokens), dayOf: day, concurrent: w.inflight };
}

/** A window from untrusted JSON (the state file), or undefined. */
export function parseWindow(x: unknown): KeyWindow | undefined {
  const o = x as Record<string, unknown> | null;
  const minute = (m: unknown): Minute | undefined => {
    const v = m as Minute | null;
    // 60 buckets: a state file written before the ring held 61; each bucket goes back to its second's slot.
    const ok = v && Array.isArray(v.stamps) && Array.isArray(v.counts) && (v.stamps.length === SLOTS || v.stamps.length === WINDOW_S) && v.counts.length === v.stamps.length;
    if (!ok || ![...v.stamps, ...v.counts].every((n) => typeof n === 'number' && Number.isFinite(n))) return undefined;
    const out = emptyMinute();
    v.stamps.forEach((stamp, j) => {
      if (stamp >= 0 && stamp > out.stamps[slotOf(stamp)]) {
        out.stamps[slotOf(stamp)] = stamp;
        out.counts[slotOf(stamp)] = v.counts[j];
      }
    });
    return out;
  };
  if (!o || typeof o !== 'object') return undefined;
  const requests = minute(o.requests);
  const tokens = minute(o.tokens);
  if (!requests || !tokens || typeof o.day !== 'number' || typeof o.dayTokens !== 'number' || !Number.isFinite(o.dayTokens)) return undefined;
  // In flight at a stop is over after a restart.
  return { requests, tokens, day: o.day, dayTokens: o.dayTokens, inflight: 0 };
}
