/**
 * The alias data model (SPEC section 9): what one change is, how two changes
 * are ordered, and which names are allowed. Shared by the table, the gossip
 * codec and the HTTP handlers, so each rule lives in one place.
 */

/** Alias and model names: non-empty, no whitespace or control characters, at most this many characters. */
export const MAX_NAME_CHARS = 128;
/** At most this many fallbacks per alias (the encoded change must also fit one gossip packet: see codec.ts). */
export const MAX_FALLBACKS = 8;
/** The writer of the entries seeded from the config file (`aliases:`), always at version 0. */
export const CONFIG_WRITER = 'config';

/** What a live alias points at: the target first, then the fallbacks in order. */
export type AliasValue = { target: string; fallbacks: string[] };

/**
 * One change of one alias, and the table's record of that alias: the change
 * with the highest order (see `compareEntries`) is the alias's state.
 */
export type AliasEntry = {
  /** The alias name clients send in `model`. */
  name: string;
  /** Lamport version: the writer's highest known version + 1 (0 for config seeds). */
  version: number;
  /** Node name of the writer (`config` for seeds); breaks version ties. */
  writer: string;
  /** The writer's wall clock (ms since the epoch) at the change; shown to operators, never used for ordering except as a last tie-break. */
  at: number;
  /** The alias's value; `null` is a tombstone (the alias was removed). */
  value: AliasValue | null;
};

/** A live alias as `list()` and `get()` show it. */
export type AliasView = AliasValue & { name: string; version: number; writer: string; at: number };

export type AliasErrorCode = 'invalid_name' | 'invalid_target' | 'too_large' | 'not_found' | 'nothing_to_revert';

/** A refused alias operation; `code` says which rule refused it. */
export class AliasError extends Error {
  constructor(
    readonly code: AliasErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'AliasError';
  }
}

// Whitespace and control characters (C0, DEL, C1) are never part of a name.
const BAD_CHAR = /[\s\u0000-\u001f\u007f-\u009f]/u;

/** Why `value` is not a valid alias or model name, or undefined when it is. */
export function nameProblem(value: unknown): string | undefined {
  if (typeof value !== 'string') return 'expected a string';
  if (value.length === 0) return 'must not be empty';
  if (value.length > MAX_NAME_CHARS) return `is longer than ${MAX_NAME_CHARS} characters`;
  if (BAD_CHAR.test(value)) return 'must not contain whitespace or control characters';
  return undefined;
}

/** Throw an `AliasError` unless `value` is a valid name; `what` says which field for the message. */
export function checkName(what: 'alias' | 'target' | 'fallback', value: unknown): string {
  const problem = nameProblem(value);
  if (problem) {
    const shown = typeof value === 'string' ? ` "${value.slice(0, 80)}"` : '';
    throw new AliasError(what === 'alias' ? 'invalid_name' : 'invalid_target', `${what} name${shown} ${problem}`);
  }
  return value as string;
}

/** Validate a target and its fallbacks; fallbacks equal to the target or repeated are dropped. */
export function checkValue(target: unknown, fallbacks: unknown): AliasValue {
  const t = checkName('target', target);
  if (fallbacks !== undefined && !Array.isArray(fallbacks)) throw new AliasError('invalid_target', 'fallbacks must be a list of model names');
  const list: string[] = [];
  for (const f of (fallbacks as unknown[] | undefined) ?? []) {
    const name = checkName('fallback', f);
    if (name !== t && !list.includes(name)) list.push(name);
  }
  if (list.length > MAX_FALLBACKS) throw new AliasError('too_large', `an alias takes at most ${MAX_FALLBACKS} fallbacks (got ${list.length})`);
  return { target: t, fallbacks: list };
}

const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/** The canonical text of an entry's content, for the last-resort tie-break. */
const contentKey = (e: AliasEntry) => JSON.stringify([e.value ? [e.value.target, e.value.fallbacks] : null, e.at]);

/**
 * The total order of changes: higher version wins, then the higher writer
 * name (plain string comparison). Two different changes with the same
 * (version, writer) can only come from a node that lost its state and wrote
 * again before it heard from the mesh; the canonical content then decides,
 * so every node still picks the same winner whatever the arrival order.
 */
export function compareEntries(a: AliasEntry, b: AliasEntry): number {
  return a.version - b.version || cmp(a.writer, b.writer) || cmp(contentKey(a), contentKey(b));
}

export const sameValue = (a: AliasValue | null, b: AliasValue | null): boolean =>
  a === b || (!!a && !!b && a.target === b.target && a.fallbacks.length === b.fallbacks.length && a.fallbacks.every((f, i) => f === b.fallbacks[i]));

/**
 * Parse an entry from untrusted JSON (gossip, the state file): undefined
 * unless every field is well-formed. Never throws.
 */
export function parseEntry(x: unknown): AliasEntry | undefined {
  if (typeof x !== 'object' || x === null || Array.isArray(x)) return undefined;
  const o = x as Record<string, unknown>;
  if (nameProblem(o.name) || nameProblem(o.writer)) return undefined;
  if (typeof o.version !== 'number' || !Number.isSafeInteger(o.version) || o.version < 0) return undefined;
  if (typeof o.at !== 'number' || !Number.isSafeInteger(o.at) || o.at < 0) return undefined;
  let value: AliasValue | null = null;
  if (o.value !== null) {
    const v = o.value as Record<string, unknown> | undefined;
    if (typeof v !== 'object' || v === null) return undefined;
    try {
      value = checkValue(v.target, v.fallbacks ?? []);
    } catch {
      return undefined;
    }
  }
  return { name: o.name as string, version: o.version, writer: o.writer as string, at: o.at, value };
}
