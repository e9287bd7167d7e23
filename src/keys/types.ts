/**
 * One change of one key in the mesh-wide key table (SPEC section 12), and
 * how two changes are ordered: the same Lamport order as aliases (higher
 * version, then writer name, then content), so every node keeps the same
 * winner whatever order gossip brought the changes in.
 */
import { keyNameProblem, parseKeyValue, type KeyValue } from '../config/key-spec.ts';

/** The writer of entries seeded from a keys file, always at version 0. */
export const CONFIG_WRITER = 'config';

export interface KeyEntry {
  name: string;
  /** Lamport version: the writer's highest known version + 1 (0 for keys-file seeds). */
  version: number;
  /** Node name of the writer (`config` for seeds). */
  writer: string;
  /** The writer's wall clock at the change, ms; shown, never ordered by except as the last tie-break. */
  at: number;
  /** The key's value; `null` is a tombstone (the key was revoked), kept so a late set cannot bring it back. */
  value: KeyValue | null;
}

const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
const contentKey = (e: KeyEntry) => JSON.stringify([e.value, e.at]);

export function compareKeyEntries(a: KeyEntry, b: KeyEntry): number {
  return a.version - b.version || cmp(a.writer, b.writer) || cmp(contentKey(a), contentKey(b));
}

const WRITER = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;

/** An entry from untrusted JSON (gossip, the state file), or undefined unless every field is valid. Never throws. */
export function parseKeyEntry(x: unknown): KeyEntry | undefined {
  if (typeof x !== 'object' || x === null || Array.isArray(x)) return undefined;
  const o = x as Record<string, unknown>;
  if (keyNameProblem(o.name) || typeof o.writer !== 'string' || !WRITER.test(o.writer)) return undefined;
  if (typeof o.version !== 'number' || !Number.isSafeInteger(o.version) || o.version < 0) return undefined;
  if (typeof o.at !== 'number' || !Number.isSafeInteger(o.at) || o.at < 0) return undefined;
  let value: KeyValue | null = null;
  if (o.value !== null) {
    const v = parseKeyValue(o.value);
    if (!v) return undefined;
    value = v;
  }
  return { name: o.name as string, version: o.version, writer: o.writer, at: o.at, value };
}

/** A refused key operation; `code` says which rule. */
export class KeyError extends Error {
  constructor(
    readonly code: 'invalid' | 'not_found' | 'exists' | 'too_large',
    message: string,
  ) {
    super(message);
    this.name = 'KeyError';
  }
}
