/**
 * TLS for the RPC tunnel in a secured mesh: TLS 1.3 with an external
 * pre-shared key, no certificates. The key is derived from the mesh secret
 * by HKDF with the tunnel's own salt and info (never the raw secret, and
 * not the key that signs forwards); the PSK identity names which secret
 * (its key id), so a node holding the previous secret during a rotation
 * (VIIWORK_MESH_SECRET_PREV) still accepts a runner on it. A peer without
 * the secret cannot finish the handshake, and sees nothing of the stream.
 */
import crypto from 'node:crypto';
import tls from 'node:tls';
import type { Duplex } from 'node:stream';

const PSK_SALT = 'viiwork/rpc-tunnel salt';
const PSK_INFO = 'viiwork/rpc-tunnel tls 1.3 psk';
const IDENTITY_PREFIX = 'viiwork-rpc/';

/** The tunnel's key for one mesh secret. */
export function tunnelKey(secret: Buffer): Buffer {
  return Buffer.from(crypto.hkdfSync('sha256', secret, PSK_SALT, PSK_INFO, 32));
}

/** The PSK identity for a key: a public id (a hash of the key, not the key). */
export function tunnelIdentity(key: Buffer): string {
  return IDENTITY_PREFIX + crypto.createHash('sha256').update('viiwork/rpc-tunnel key id').update(key).digest('hex').slice(0, 16);
}

const COMMON = { minVersion: 'TLSv1.3', maxVersion: 'TLSv1.3' } as const;

/** The lender's end: a TLS server over the upgraded socket, taking any of the mesh's current secrets. */
export function tunnelServerTls(socket: Duplex, secrets: readonly Buffer[]): tls.TLSSocket {
  const keys = new Map(secrets.map((s) => tunnelKey(s)).map((k) => [tunnelIdentity(k), k] as const));
  const t = new tls.TLSSocket(socket, {
    ...COMMON,
    isServer: true,
    // null: an unknown identity, and the handshake fails (there is no certificate to fall back on).
    pskCallback: (_s: tls.TLSSocket, identity: string) => keys.get(identity) ?? null,
  } as tls.TLSSocketOptions);
  return t;
}

/** The runner's end: a TLS client over the upgraded socket, with the primary secret's key. */
export function tunnelClientTls(socket: Duplex, secret: Buffer): tls.TLSSocket {
  const key = tunnelKey(secret);
  const identity = tunnelIdentity(key);
  return tls.connect({
    ...COMMON,
    socket,
    pskCallback: () => ({ psk: key, identity }),
    // No certificate: the key is the peer's proof.
    checkServerIdentity: () => undefined,
  });
}
