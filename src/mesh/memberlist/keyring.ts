/**
 * The keyring (keyring.go): a primary key used to encrypt, plus any number
 * of extra keys that are tried, after the primary, to decrypt. Keys are
 * 16, 24 or 32 bytes (AES-128/192/256).
 */
export function validateKey(key: Buffer): void {
  if (![16, 24, 32].includes(key.length)) throw new Error('key size must be 16, 24 or 32 bytes');
}

export class Keyring {
  private keys: Buffer[] = [];

  /** `keys[0]` becomes the primary key. */
  constructor(keys: Buffer[] = []) {
    for (const k of keys) this.addKey(k);
  }

  /** Installs a key; the first key ever added becomes primary. */
  addKey(key: Buffer): void {
    validateKey(key);
    if (this.keys.some((k) => k.equals(key))) return;
    this.keys.push(Buffer.from(key));
  }

  /** Makes an installed key the primary one. */
  useKey(key: Buffer): void {
    const i = this.keys.findIndex((k) => k.equals(key));
    if (i < 0) throw new Error('Requested key is not in the keyring');
    const [k] = this.keys.splice(i, 1);
    this.keys.unshift(k);
  }

  removeKey(key: Buffer): void {
    if (this.keys.length && this.keys[0].equals(key)) throw new Error('Removing the primary key is not allowed');
    this.keys = this.keys.filter((k) => !k.equals(key));
  }

  /** All keys, primary first. */
  getKeys(): Buffer[] {
    return [...this.keys];
  }

  getPrimaryKey(): Buffer | undefined {
    return this.keys[0];
  }

  get size(): number {
    return this.keys.length;
  }
}
