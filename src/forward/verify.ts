/**
 * Judging the X-Viiwork-* headers of an incoming request (SPEC section 6):
 * a verified forward from a member, a plain client request, or 401. After
 * this, every X-Viiwork-* header but X-Viiwork-Prefer is gone.
 */
import type http from 'node:http';
import { errors } from '../http/errors.ts';
import { isPeer, type MemberTable } from '../mesh/members.ts';
import { decodeClaims, HEADER_CLAIMS, type ForwardClaims } from '../security/claims.ts';
import { classifyForwardHeaders, headerValue, HEADER_NODE, removeMeshHeaders } from '../security/headers.ts';
import type { MeshMode } from '../security/secret.ts';
import { sha256HexAsync, SIGNING_V2_SINCE, versionBefore } from '../security/signing.ts';

/** A client's request, or a verified forward from member `from` with the claims it carried (security/claims.ts). */
export type Sender = { kind: 'client' } | { kind: 'forward'; from: string; claims: ForwardClaims };

function normalizeIp(ip: string | undefined): string {
  if (!ip) return '';
  return ip.startsWith('::ffff:') ? ip.slice(7) : ip;
}

export async function judgeForward(req: http.IncomingMessage, body: Buffer, mode: MeshMode, members: MemberTable | undefined, onReject: (reason: string) => void, self?: string): Promise<Sender> {
  const headers = req.headers;
  const cls = classifyForwardHeaders(headers);
  try {
    if (mode.mode === 'secured') {
      if (cls === 'none') return { kind: 'client' };
      if (cls === 'partial') throw reject('incomplete X-Viiwork-Node/-Ts/-Nonce/-Auth set');
      const v = mode.verifier.verify({
        method: req.method ?? 'POST',
        pathWithQuery: req.url ?? '/',
        bodySha256: await sha256HexAsync(body),
        headers,
        self,
        // During a rolling upgrade: the receiver-less v1 only from a member still running a version before v2.
        acceptV1: (node) => versionBefore(members?.get(node)?.version, SIGNING_V2_SINCE),
      });
      if (!v.ok) throw reject(v.reason);
      const m = members?.get(v.node);
      // The MAC proves the sender holds the mesh secret. A member merely suspected (a probe answered late on a loaded
      // machine) is still a member: refused, its forwards were sent back (401) to run elsewhere than where it priced
      // them best for the seconds it takes to refute. SPEC 6 names the alive member for the open mesh only, where the
      // source address is all the proof there is.
      if (!m || !isPeer(m)) throw reject(`sender "${v.node}" is not a live member (${m ? (m.role === 'foreign' ? 'foreign' : m.state) : 'unknown'})`);
      return { kind: 'forward', from: v.node, claims: claimsOf(v.claims) };
    }
    const claim = headerValue(headers, HEADER_NODE);
    if (claim === undefined) return { kind: 'client' };
    const name = Array.isArray(claim) ? claim[0] : claim;
    const m = members?.get(name);
    // SPEC 6: only from the IP of the *alive* member it names. Said apart from a wrong address, which is an impostor.
    if (!m || m.state !== 'alive' || m.role === 'foreign') throw reject(`X-Viiwork-Node "${name.slice(0, 64)}" is not an alive member (${m ? m.state : 'unknown'})`);
    if (normalizeIp(req.socket.remoteAddress) !== normalizeIp(m.addr)) {
      throw reject(`X-Viiwork-Node "${name.slice(0, 64)}" does not come from that member's address`);
    }
    const claims = headerValue(headers, HEADER_CLAIMS);
    if (Array.isArray(claims)) throw reject('forward headers repeated');
    return { kind: 'forward', from: name, claims: claimsOf(claims) };
  } finally {
    removeMeshHeaders(headers);
  }

  function claimsOf(text: string | undefined): ForwardClaims {
    const claims = decodeClaims(text);
    if (typeof claims === 'string') throw reject(claims);
    return claims;
  }

  function reject(reason: string) {
    onReject(reason);
    return errors.unauthorized(reason);
  }
}
