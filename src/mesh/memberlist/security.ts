/**
 * memberlist's encrypted-message format (security.go):
 *
 *   [version 1 byte][nonce 12 bytes][AES-GCM ciphertext + 16-byte tag]
 *
 * Version 1 has no padding (what protocol versions >= 2 send); version 0
 * pads the plaintext with PKCS7 to the AES block size and is accepted on
 * decrypt. Additional data: for packets the label ('' = none); for streams
 * the 5 bytes `[encrypt type][uint32 length]` followed by the label.
 */
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';

export const VERSION_SIZE = 1;
export const NONCE_SIZE = 12;
export const TAG_SIZE = 16;
export const BLOCK_SIZE = 16;
export const MAX_ENCRYPTION_VERSION = 1;

export type EncryptionVersion = 0 | 1;

/** Bytes that encryption adds (encryptOverhead). */
export function encryptOverhead(vsn: EncryptionVersion): number {
  return vsn === 0 ? 45 : 29;
}

/** Length of the encrypted form of `inp` plaintext bytes (encryptedLength). */
export function encryptedLength(vsn: EncryptionVersion, inp: number): number {
  if (vsn >= 1) return VERSION_SIZE + NONCE_SIZE + inp + TAG_SIZE;
  const padding = BLOCK_SIZE - (inp % BLOCK_SIZE);
  return VERSION_SIZE + NONCE_SIZE + inp + padding + TAG_SIZE;
}

function algo(key: Buffer): 'aes-128-gcm' | 'aes-192-gcm' | 'aes-256-gcm' {
  switch (key.length) {
    case 16:
      return 'aes-128-gcm';
    case 24:
      return 'aes-192-gcm';
    case 32:
      return 'aes-256-gcm';
  }
  throw new Error('key size must be 16, 24 or 32 bytes');
}

/**
 * Encrypts `msg` with `key`. `nonce` is random unless given (tests pin it to
 * compare bytes with Go's output).
 */
export function encryptPayload(
  vsn: EncryptionVersion,
  key: Buffer,
  msg: Buffer,
  data: Buffer | null,
  nonce: Buffer = randomBytes(NONCE_SIZE),
): Buffer {
  if (nonce.length !== NONCE_SIZE) throw new Error('nonce must be 12 bytes');
  let src = msg;
  if (vsn === 0) {
    const more = BLOCK_SIZE - (msg.length % BLOCK_SIZE);
    src = Buffer.concat([msg, Buffer.alloc(more, more)]);
  }
  const c = createCipheriv(algo(key), key, nonce);
  if (data && data.length) c.setAAD(data);
  const ct = Buffer.concat([c.update(src), c.final()]);
  return Buffer.concat([Buffer.from([vsn]), nonce, ct, c.getAuthTag()]);
}

function decryptMessage(key: Buffer, msg: Buffer, data: Buffer | null): Buffer {
  const nonce = msg.subarray(VERSION_SIZE, VERSION_SIZE + NONCE_SIZE);
  const body = msg.subarray(VERSION_SIZE + NONCE_SIZE, msg.length - TAG_SIZE);
  const tag = msg.subarray(msg.length - TAG_SIZE);
  const d = createDecipheriv(algo(key), key, nonce);
  if (data && data.length) d.setAAD(data);
  d.setAuthTag(tag);
  return Buffer.concat([d.update(body), d.final()]);
}

/** Tries each key in turn; throws when none decrypts. */
export function decryptPayload(keys: Buffer[], msg: Buffer, data: Buffer | null): Buffer {
  if (msg.length === 0) throw new Error('Cannot decrypt empty payload');
  const vsn = msg[0];
  if (vsn > MAX_ENCRYPTION_VERSION) throw new Error(`Unsupported encryption version ${vsn}`);
  if (msg.length < encryptedLength(vsn as EncryptionVersion, 0)) {
    throw new Error(`Payload is too small to decrypt: ${msg.length}`);
  }
  for (const key of keys) {
    let plain: Buffer;
    try {
      plain = decryptMessage(key, msg, data);
    } catch {
      continue;
    }
    if (vsn === 0) {
      const pad = plain.length ? plain[plain.length - 1] : 0;
      return plain.subarray(0, plain.length - pad);
    }
    return plain;
  }
  throw new Error('No installed keys could decrypt the message');
}
