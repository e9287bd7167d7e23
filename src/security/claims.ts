/**
 * Claims: what an entry node tells the executor of a forward beyond its
 * body, carried in one header, `X-Viiwork-Claims`, and covered by the
 * signature in a secured mesh (signature v3, signing.ts). Today: `chain`
 * (the prompt's prefix chain, prompt/chain-claim.ts), `key` (the client
 * key's name, SPEC section 12), `out` (the output its entry held back for
 * the key's limits, api/inference.ts), `band` and `wait` (the request's priority
 * band and how long it may wait for a slot there, queue/forward-claims.ts),
 * `req` and `traceparent` (its timeline id and trace context).
 *
 * Wire form: `name=value;name=value`, names `[a-z][a-z0-9_]*` (at most 32
 * characters, each once), values visible ASCII without `;`. The form is not
 * canonicalised: the MAC covers the header exactly as sent, so a receiver
 * needs only to split it. Each claim's own value format is its owner's to
 * check (a claim a receiver does not know is ignored, so new claims can be
 * added without a new signature version).
 */

/** The header of a forward's claims. */
export const HEADER_CLAIMS = 'x-viiwork-claims';

/** The longest claims header a sender writes and a receiver reads (Node's request headers are bounded at 16 KiB in all). */
export const CLAIMS_MAX_BYTES = 8192;

/** A forward's claims by name; empty for a client's request or a forward that carries none. */
export type ForwardClaims = ReadonlyMap<string, string>;

export const NO_CLAIMS: ForwardClaims = new Map();

const NAME = /^[a-z][a-z0-9_]{0,31}$/;
// Visible ASCII (0x21–0x7e) without ';' (0x3b).
const VALUE = /^[\x21-\x3a\x3c-\x7e]*$/;

/**
 * The header value for `claims` (undefined values left out); undefined when
 * there are none. A name or value outside the wire form, or claims longer
 * than CLAIMS_MAX_BYTES together, are a programming error: a claim that can
 * grow (the prefix chain) is bounded by its owner, who leaves it out when it
 * would not fit (the executor then works it out itself).
 */
export function encodeClaims(claims: Readonly<Record<string, string | undefined>>): string | undefined {
  let out = '';
  for (const name in claims) {
    const value = claims[name];
    if (value === undefined) continue;
    if (!NAME.test(name) || !VALUE.test(value)) throw new Error(`claim ${name} cannot be carried: a name is [a-z][a-z0-9_]*, a value visible ASCII without ';'`);
    out += (out ? ';' : '') + name + '=' + value;
  }
  if (out.length > CLAIMS_MAX_BYTES) throw new Error(`claims of ${out.length} bytes exceed ${CLAIMS_MAX_BYTES}`);
  return out || undefined;
}

const MALFORMED = 'malformed X-Viiwork-Claims (expected name=value;name=value)';

/** The claims of a header value; a string saying what is wrong with a malformed one. */
export function decodeClaims(text: string | undefined): ForwardClaims | string {
  if (text === undefined || text === '') return NO_CLAIMS;
  if (text.length > CLAIMS_MAX_BYTES) return `X-Viiwork-Claims longer than ${CLAIMS_MAX_BYTES} bytes`;
  const out = new Map<string, string>();
  // Walked by index, not split: every forward's executor reads this header, and the split array cost more than the rest.
  for (let start = 0; start <= text.length; ) {
    let end = text.indexOf(';', start);
    if (end < 0) end = text.length;
    const eq = text.indexOf('=', start);
    if (eq < 0 || eq > end) return MALFORMED;
    const name = text.slice(start, eq);
    const value = text.slice(eq + 1, end);
    if (!NAME.test(name) || !VALUE.test(value)) return MALFORMED;
    if (out.has(name)) return `X-Viiwork-Claims names ${name} twice`;
    out.set(name, value);
    start = end + 1;
  }
  return out;
}
