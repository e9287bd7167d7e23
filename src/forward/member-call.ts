/**
 * The one way this node calls a member (SPEC section 9): the member's API
 * address from the member table, and the headers that make the call a
 * member's: signed over method, path, body hash and recipient in a secured
 * mesh, the sender's name alone in an open one. Forwards (send.ts) relay the
 * answer to a client; the other calls (load and unload asks,
 * lifecycle-ask.ts) read it here, whole and bounded in time.
 */
import { request, type Dispatcher } from 'undici';
import { RES_REFUSED } from '../http/viiwork-headers.ts';
import { sha256Hex } from '../security/signing.ts';

/** What calling a member needs from the node. */
export interface MemberLink {
  /** `http://ip:port` of a member's API, or undefined when unknown. */
  apiOf(host: string): string | undefined;
  /** Whether `sign` needs the body's SHA-256 (a secured mesh); an open mesh names the sender only. */
  readonly signsBody: boolean;
  /**
   * The headers that make a request a forward from this node to `to` (the body given by its SHA-256), with its
   * claims (security/claims.ts, encoded) when `to` reads them.
   */
  sign(method: string, pathWithQuery: string, bodySha256: string, to: string, claims?: string): Record<string, string>;
  /** Connections to members' APIs, leaving from the advertise address. */
  readonly dispatcher: Dispatcher;
}

/** Where a call to `host` goes and its member headers; undefined when the member has no API address. */
export function addressMember(link: MemberLink, host: string, method: string, pathWithQuery: string, bodySha256: string, claims?: string): { origin: string; headers: Record<string, string> } | undefined {
  const origin = link.apiOf(host);
  return origin ? { origin, headers: link.sign(method, pathWithQuery, bodySha256, host, claims) } : undefined;
}

/** A member's answer read whole. `status` 0: no answer (no address, no connection, past the deadline), `text` says why. */
export interface MemberAnswer {
  status: number;
  /** The answer's JSON; undefined when it is not JSON. */
  body: unknown;
  /** The answer's first 300 characters, or why there is none. */
  text: string;
  /** Its X-Viiwork-Refused marker, when it has one. */
  refused?: string;
}

/** POST `doc` as JSON to a member, with its member headers; waits at most `timeoutMs` for the answer's headers and between its bytes. */
export async function postToMember(link: MemberLink, host: string, path: string, doc: unknown, timeoutMs: number): Promise<MemberAnswer> {
  const body = Buffer.from(JSON.stringify(doc));
  const to = addressMember(link, host, 'POST', path, link.signsBody ? sha256Hex(body) : '');
  if (!to) return { status: 0, body: undefined, text: `member ${host} has no API address` };
  try {
    const r = await request(to.origin + path, {
      method: 'POST',
      body,
      headers: { 'content-type': 'application/json', ...to.headers },
      dispatcher: link.dispatcher,
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
    });
    const text = await r.body.text();
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    return { status: r.statusCode, body: parsed, text: text.slice(0, 300), refused: r.headers[RES_REFUSED] as string | undefined };
  } catch (err) {
    return { status: 0, body: undefined, text: (err as Error).message };
  }
}
