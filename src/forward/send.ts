/**
 * Sending one forward to a member (SPEC section 9, step 9): signed (or named,
 * in an open mesh), sent once, watched while the member is quiet, and
 * classified. A refusal the receiver marks (`X-Viiwork-Refused`), no
 * connection, or a member that goes quiet before its first byte comes back
 * as `refused` (or `engine-failed`) for placement to retry; every other
 * status is the answer, relayed once with its body.
 */
import type http from 'node:http';
import { engineFailureDetail } from '../http/errors.ts';
import { GoneFlag, type Gone } from '../http/gone.ts';
import { relay, upstreamErrorText, type RelayOptions } from '../http/relay.ts';
import { RES_MOVED, RES_REFUSED, RES_SLOT, refusalMarker } from '../http/viiwork-headers.ts';
import { moveOfHeader, type MoveResult } from '../survive/move-plan.ts';
import { addressMember, type MemberLink } from './member-call.ts';
import type { RefusedBy, RunOutcome } from './outcome.ts';

/** What sending a forward needs from the node: calling a member (member-call.ts), and whether it is still there. */
export interface PeerLink extends MemberLink {
  /** This node's name (the sender). */
  readonly self: string;
  /**
   * A watch over a forward to `host` begun now: true once the member has gone quiet (no longer alive, or its
   * reports went stale). A forward sent on a report already stale (count_tokens asks a member polled only in the
   * background) gets `stale_after` from its own start instead: the staleness it was sent on is not news.
   */
  quietSince(host: string): () => boolean;
}

export interface ForwardCall {
  host: string;
  path: string;
  body: Buffer;
  /** SHA-256 hex of `body` ('' when the link does not sign bodies). */
  bodySha256: string;
  /** What the executor is told beside the body (security/claims.ts, encoded); signed with it. */
  claims?: string;
  contentType: string;
  stream: boolean;
  sessionKey?: string;
  signal: Gone;
  responseHeaders: Record<string, string>;
  streamStallMs?: number;
  writeStallMs?: number;
  /** Sees what the client is sent of a stream (http/relay.ts `tap`). */
  tap?: (out: Buffer | string) => void;
  /** A stream cut after its first byte comes back open as `cut` (http/relay.ts `handBack`). */
  handBack?: boolean;
  /** A continuation (SPEC 13): the client holds the stream already; the member's stream is rewritten into it by `splice`. */
  splice?: RelayOptions['translate'];
}

/** How often a member is checked while a forward waits on it. */
export const WATCH_INTERVAL_MS = 200;

/** The slot an executor says it took (X-Viiwork-Slot): a small whole number, else nothing. */
export function slotOfHeader(v: string | string[] | undefined): number | undefined {
  if (typeof v !== 'string' || !/^\d{1,4}$/.test(v)) return undefined;
  return Number(v);
}

/** A marked refusal is retried; anything else the executor says is the answer. */
export function forwardVerdict(_status: number, headers: http.IncomingHttpHeaders): 'answer' | 'refused' {
  return refusalMarker(headers[RES_REFUSED]) ? 'refused' : 'answer';
}

export async function sendForward(link: PeerLink, call: ForwardCall, res: http.ServerResponse): Promise<RunOutcome> {
  const to = addressMember(link, call.host, 'POST', call.path, call.bodySha256, call.claims);
  if (!to) return { kind: 'refused', by: 'connection', detail: `member ${call.host} has no API address` };
  const headers: Record<string, string> = {
    'content-type': call.contentType,
    accept: call.stream ? 'text/event-stream' : 'application/json',
    ...to.headers,
  };
  if (call.sessionKey) headers['x-session-affinity'] = call.sessionKey;
  // A member that goes quiet (frozen, cut off) would hold the request forever: before its first byte the
  // forward counts as refused and is retried; after it, the client's stream ends with an error event.
  const quiet = quietWatchOf(link).watch(call.host);
  let moved: MoveResult | undefined;
  let slot: number | undefined;
  const opts: RelayOptions = {
    responseHeaders: call.responseHeaders,
    stripUsage: false,
    // The executor's word on a slot cache moved for this run, and on the slot it took, read with its headers.
    verdict: (status, h) => ((moved = moveOfHeader(h[RES_MOVED])), (slot = slotOfHeader(h[RES_SLOT])), forwardVerdict(status, h)),
    quiet: quiet.flag,
    quietReason: () => `member ${call.host} went quiet (its reports are stale or it is no longer alive)`,
    streamStallMs: call.streamStallMs,
    writeStallMs: call.writeStallMs,
    // The executor's count reaches the client too, as it came (header or trailer).
    cachedOut: true,
    ...(call.tap ? { tap: call.tap } : {}),
    ...(call.handBack ? { handBack: true } : {}),
    ...(call.splice ? { translate: call.splice, continuing: true } : {}),
  };
  try {
    const r = await relay({ origin: to.origin, path: call.path, method: 'POST', headers, body: call.body, signal: call.signal, dispatcher: link.dispatcher }, res, opts);
    switch (r.kind) {
      case 'done':
        return { kind: 'answered', status: r.status, firstContentAt: r.firstContentAt, ...(r.cachedTokens !== undefined ? { cachedTokens: r.cachedTokens } : {}), ...(moved ? { moved } : {}), ...(slot !== undefined ? { slot } : {}) };
      case 'broken':
        return { kind: 'answered', status: 0 };
      case 'aborted':
        return { kind: 'aborted' };
      case 'cut':
        return { kind: 'cut', host: call.host, detail: r.detail };
      case 'refused': {
        if (r.status === undefined) return { kind: 'refused', by: quiet.flag.aborted ? 'quiet' : 'connection', detail: r.detail };
        const marker = refusalMarker(r.headers?.[RES_REFUSED]);
        // A continuation answered with anything but a stream (its engine refused the continued prompt): not that host again.
        if (marker === 'engine' || (call.splice && marker === undefined)) return { kind: 'engine-failed', host: call.host, text: engineFailureDetail(upstreamErrorText(r.body) ?? r.detail) };
        return { kind: 'refused', by: (marker ?? 'full') as RefusedBy, detail: `${r.detail}${marker ? ` (${marker})` : ''}` };
      }
    }
  } finally {
    quiet.end();
  }
}

/**
 * The forwards in flight over one link, checked together every
 * WATCH_INTERVAL_MS: one timer for all of them while any is in flight,
 * not a timer and an AbortController per forward.
 */
class QuietWatch {
  readonly #watched = new Set<{ quiet: () => boolean; flag: GoneFlag }>();
  #timer: NodeJS.Timeout | undefined;

  constructor(private readonly link: PeerLink) {}

  /** Watch a forward to `host`: its flag fires when the member goes quiet; `end` stops watching it. */
  watch(host: string): { flag: GoneFlag; end(): void } {
    const w = { quiet: this.link.quietSince(host), flag: new GoneFlag() };
    this.#watched.add(w);
    this.#timer ??= setInterval(() => this.#check(), WATCH_INTERVAL_MS);
    return {
      flag: w.flag,
      end: () => {
        this.#watched.delete(w);
        if (this.#watched.size === 0 && this.#timer !== undefined) {
          clearInterval(this.#timer);
          this.#timer = undefined;
        }
      },
    };
  }

  #check(): void {
    for (const w of this.#watched) if (w.quiet()) w.flag.fire();
  }
}

const watches = new WeakMap<PeerLink, QuietWatch>();

function quietWatchOf(link: PeerLink): QuietWatch {
  let w = watches.get(link);
  if (!w) watches.set(link, (w = new QuietWatch(link)));
  return w;
}
