/**
 * The mesh mode (SPEC section 6): secured by `VIIWORK_MESH_SECRET` (and
 * `VIIWORK_MESH_SECRET_PREV` while rotating), or open by `mesh.open: true`.
 * Exactly one of the two; anything else refuses to start with a message
 * that names both and says how to fix it.
 */
import crypto from 'node:crypto';
import { RequestSigner, RequestVerifier } from './signing.ts';

export const SECRET_ENV = 'VIIWORK_MESH_SECRET';
export const SECRET_PREV_ENV = 'VIIWORK_MESH_SECRET_PREV';
/** Every environment variable that carries secret material; engines never see them. */
export const SECRET_ENV_VARS = [SECRET_ENV, SECRET_PREV_ENV] as const;
/** The client key the CLI sends to a node that requires one (api.keys_env / api.keys_file). */
export const API_KEY_ENV = 'VIIWORK_API_KEY';
export const SECRET_BYTES = 32;

export class MeshModeError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'MeshModeError';
  }
}

export type MeshMode =
  | {
      mode: 'secured';
      /** Raw secrets, primary first then the previous one: the gossip keyring. */
      keys: Buffer[];
      /** Signs this node's forwards with the primary secret's derived key. */
      signer: RequestSigner;
      /** Verifies forwards signed with any of `keys` (one nonce cache per node). */
      verifier: RequestVerifier;
    }
  | { mode: 'open' };

/** A new secret for `viiwork secret`: 32 random bytes, base64. */
export function newSecret(): string {
  return crypto.randomBytes(SECRET_BYTES).toString('base64');
}

const HOW_TO_MAKE = 'run `viiwork secret` to print a new one';

/**
 * Decode one secret variable: standard base64 of exactly 32 bytes
 * (44 characters with its `=` padding, which may be left off; surrounding
 * whitespace is ignored). A bad value throws naming the variable.
 */
export function parseSecret(value: string, variable: string): Buffer {
  const text = value.trim();
  const bad = (why: string) =>
    new MeshModeError(`${variable} ${why}: it must be the base64 of exactly ${SECRET_BYTES} random bytes (${HOW_TO_MAKE})`);
  if (text === '') throw bad('is set but empty');
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(text)) throw bad('is not valid base64');
  const bytes = Buffer.from(text, 'base64');
  if (bytes.toString('base64').replace(/=+$/, '') !== text.replace(/=+$/, '')) throw bad('is not valid base64');
  if (bytes.length !== SECRET_BYTES) throw bad(`decodes to ${bytes.length} bytes`);
  return bytes;
}

export interface MeshModeOptions {
  /** Clock for the verifier (tests). */
  now?: () => number;
  maxNonces?: number;
}

/**
 * The mesh mode from the environment and `mesh.open`. Throws MeshModeError
 * (whose message is meant for the operator as is) when the secret is
 * malformed, when neither or both modes are asked for, or when only the
 * previous secret is set.
 */
export function loadMeshMode(env: NodeJS.ProcessEnv, meshOpen: boolean, opts: MeshModeOptions = {}): MeshMode {
  const rawPrimary = env[SECRET_ENV];
  const rawPrev = env[SECRET_PREV_ENV];
  const primary = rawPrimary === undefined ? undefined : parseSecret(rawPrimary, SECRET_ENV);
  const prev = rawPrev === undefined ? undefined : parseSecret(rawPrev, SECRET_PREV_ENV);

  if (primary && meshOpen) {
    throw new MeshModeError(
      `both modes asked for: ${SECRET_ENV} is set and mesh.open is true. ` +
        `For a secured mesh remove mesh.open (or set it to false); for an open mesh unset ${SECRET_ENV}.`,
    );
  }
  if (!primary && prev) {
    throw new MeshModeError(
      `${SECRET_PREV_ENV} is set without ${SECRET_ENV}: during a rotation set ${SECRET_ENV} to the new secret ` +
        `and ${SECRET_PREV_ENV} to the old one (mesh.open must stay false).`,
    );
  }
  if (!primary && !meshOpen) {
    throw new MeshModeError(
      `no mesh mode: set ${SECRET_ENV} to the same secret on every node for a secured mesh ` +
        `(${HOW_TO_MAKE}), or set mesh.open: true in the config for an open mesh on a trusted network.`,
    );
  }
  if (!primary) return { mode: 'open' };

  const keys = [primary];
  if (prev && !prev.equals(primary)) keys.push(prev);
  return {
    mode: 'secured',
    keys,
    signer: new RequestSigner(primary, { now: opts.now }),
    verifier: new RequestVerifier({ secrets: keys, now: opts.now, maxNonces: opts.maxNonces }),
  };
}

/** A copy of `env` without the secret variables, for engine child processes. */
export function scrubEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const out: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(env)) {
    if (k.startsWith(SECRET_ENV)) continue; // both variables, and any future VIIWORK_MESH_SECRET_*
    out[k] = v;
  }
  return out;
}
