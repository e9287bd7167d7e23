/**
 * One entry of the key table (SPEC section 12) and its validation: the same
 * rules for the keys file, `POST`/`PATCH /v1/keys`, the state file and
 * gossip, so an entry one of them accepts every other accepts too. Each
 * problem names the field's path (`keys[2].limits.tpm`) and what to write.
 */

import { isObj as isObject } from '../chat/fields.ts';

export const ROLES = ['user', 'admin'] as const;
export type Role = (typeof ROLES)[number];
export const PRIORITIES = ['interactive', 'batch'] as const;
/** Highest first: a band's index is its rank (interactive is served before batch). */
export type Priority = (typeof PRIORITIES)[number];
export const LIMIT_KINDS = ['rpm', 'tpm', 'tokens_per_day', 'concurrent'] as const;
export type LimitKind = (typeof LIMIT_KINDS)[number];
export type Limits = Partial<Record<LimitKind, number>>;

/** What a key may do; everything but the name, which is the table's index. */
export interface KeyValue {
  /** SHA-256 of the secret, lower-case hex; the secret itself is kept nowhere. */
  sha256: string;
  role: Role;
  /** Globs over model and alias names (`*` any run of characters, `?` one); `["*"]` is every model. */
  models: string[];
  /** The highest priority this key may ask for. */
  priority: Priority;
  /** Its share of a full fleet against other keys of its band. */
  weight: number;
  limits: Limits;
}

export interface KeySpec extends KeyValue {
  name: string;
}

export interface SpecProblem {
  /** Path of the field inside the entry (`limits.tpm`), or '' for the entry itself. */
  path: string;
  message: string;
}

export const KEY_NAME = /^[A-Za-z0-9._-]{1,64}$/;
/** Names the node gives callers that are not table entries (plain keys, no key at all). */
export const RESERVED_NAMES = ['local', 'anonymous'];
export const MAX_GLOBS = 32;
export const MAX_GLOB_CHARS = 128;
export const MAX_WEIGHT = 1000;
const FIELDS = ['name', 'sha256', 'role', 'models', 'priority', 'weight', 'limits'];

export const DEFAULTS: Omit<KeyValue, 'sha256'> = { role: 'user', models: ['*'], priority: 'interactive', weight: 1, limits: {} };

/** Why `name` cannot name a key, or undefined. */
export function keyNameProblem(name: unknown): string | undefined {
  if (typeof name !== 'string') return 'a key needs a "name" (a string)';
  if (!KEY_NAME.test(name)) return `"${name.slice(0, 80)}" is not a key name: use 1 to 64 of A-Z a-z 0-9 . _ -`;
  if (RESERVED_NAMES.includes(name)) return `"${name}" is reserved (it names callers without a table key); choose another name`;
  return undefined;
}


/**
 * Validate the fields of `raw` that it has (`partial`: a PATCH, where a
 * missing field keeps its value) or all of them with defaults. `withName`:
 * the entry carries its name (a keys file, a POST) rather than the URL.
 */
export function checkKeyFields(raw: unknown, opts: { partial?: boolean; withName?: boolean; needHash?: boolean } = {}): { value: Partial<KeySpec>; problems: SpecProblem[] } {
  const problems: SpecProblem[] = [];
  const value: Partial<KeySpec> = {};
  if (!isObject(raw)) return { value, problems: [{ path: '', message: 'a key entry must be a mapping of name, sha256, role, models, priority, weight, limits' }] };
  for (const k of Object.keys(raw)) {
    if (!FIELDS.includes(k) || (k === 'name' && !opts.withName)) problems.push({ path: k, message: `unknown field "${k.slice(0, 40)}"; a key takes ${FIELDS.filter((f) => f !== 'name' || opts.withName).join(', ')}` });
  }
  const has = (k: string) => raw[k] !== undefined;
  if (opts.withName) {
    const p = keyNameProblem(raw.name);
    if (p) problems.push({ path: 'name', message: p });
    else value.name = raw.name as string;
  }
  if (has('sha256')) {
    if (typeof raw.sha256 !== 'string' || !/^[0-9a-fA-F]{64}$/.test(raw.sha256)) problems.push({ path: 'sha256', message: 'a malformed hash: write the SHA-256 of the key as 64 hex digits (printf %s "$KEY" | sha256sum)' });
    else value.sha256 = raw.sha256.toLowerCase();
  } else if (opts.needHash) problems.push({ path: 'sha256', message: 'a key needs "sha256", the SHA-256 of its secret as 64 hex digits (viiwork keys add makes one)' });
  if (has('role')) {
    if (!(ROLES as readonly unknown[]).includes(raw.role)) problems.push({ path: 'role', message: `unknown role ${JSON.stringify(raw.role)?.slice(0, 40)}: use user or admin` });
    else value.role = raw.role as Role;
  }
  if (has('models')) {
    const m = raw.models;
    if (!Array.isArray(m) || m.length === 0 || m.length > MAX_GLOBS || m.some((g) => typeof g !== 'string' || g === '' || g.length > MAX_GLOB_CHARS || /\s/.test(g))) {
      problems.push({ path: 'models', message: `models must be a list of 1 to ${MAX_GLOBS} model or alias names or globs (such as "qwen*"), without spaces` });
    } else value.models = [...new Set(m as string[])];
  }
  if (has('priority')) {
    if (!(PRIORITIES as readonly unknown[]).includes(raw.priority)) problems.push({ path: 'priority', message: `unknown priority ${JSON.stringify(raw.priority)?.slice(0, 40)}: use interactive or batch` });
    else value.priority = raw.priority as Priority;
  }
  if (has('weight')) {
    const w = raw.weight;
    if (typeof w !== 'number' || !Number.isFinite(w) || w <= 0 || w > MAX_WEIGHT) problems.push({ path: 'weight', message: `weight must be a number above 0 and at most ${MAX_WEIGHT}` });
    else value.weight = w;
  }
  if (has('limits')) {
    const l = raw.limits;
    if (!isObject(l)) problems.push({ path: 'limits', message: `limits must be a mapping of ${LIMIT_KINDS.join(', ')}` });
    else {
      const limits: Limits = {};
      for (const [k, v] of Object.entries(l)) {
        if (!(LIMIT_KINDS as readonly string[]).includes(k)) problems.push({ path: `limits.${k.slice(0, 40)}`, message: `unknown limit "${k.slice(0, 40)}"; use ${LIMIT_KINDS.join(', ')}` });
        else if (v === null) continue; // PATCH: null removes the limit
        else if (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0) problems.push({ path: `limits.${k}`, message: `limit ${k} must be a whole number above 0 (leave it out for no limit)` });
        else limits[k as LimitKind] = v;
      }
      value.limits = limits;
    }
  }
  if (!opts.partial) {
    for (const [k, d] of Object.entries(DEFAULTS)) if ((value as Record<string, unknown>)[k] === undefined) (value as Record<string, unknown>)[k] = structuredClone(d);
  }
  return { value, problems };
}

/** A complete, valid entry from untrusted JSON (gossip, the state file), or undefined. Never throws. */
export function parseKeyValue(raw: unknown): KeyValue | undefined {
  const { value, problems } = checkKeyFields(raw, { needHash: true });
  return problems.length ? undefined : (value as KeyValue);
}

/**
 * `*` and `?` globs; everything else literal. A key holder chooses both the
 * glob (its own scope) and the name, so the match must stay linear in the
 * name whatever the glob: a RegExp built from the glob backtracks (issue 46:
 * `*a*a…*b` against 255 `a`s froze a node for minutes). The glob is cut at
 * its stars; the pieces between them are found leftmost in turn, which is
 * exact for `*` (taking a piece's first place leaves the most room for the
 * rest), so the work is at most name length × glob length, never exponential.
 */
export function globMatch(glob: string, name: string): boolean {
  if (glob === '*') return true;
  if (!/[*?]/.test(glob)) return glob === name;
  const pieces = glob.split('*');
  if (pieces.length === 1) return glob.length === name.length && pieceAt(glob, name, 0);
  const first = pieces[0];
  const last = pieces[pieces.length - 1];
  const end = name.length - last.length;
  if (first.length > end || !pieceAt(first, name, 0) || !pieceAt(last, name, end)) return false;
  let from = first.length;
  for (let i = 1; i < pieces.length - 1; i++) {
    const piece = pieces[i];
    const at = findPiece(piece, name, from, end);
    if (at < 0) return false;
    from = at + piece.length;
  }
  return true;
}

/** Does `piece` (literal but for `?`) match `name` at `at`? */
function pieceAt(piece: string, name: string, at: number): boolean {
  for (let i = 0; i < piece.length; i++) {
    const c = piece.charCodeAt(i);
    if (c !== 63 /* ? */ && c !== name.charCodeAt(at + i)) return false;
  }
  return true;
}

/** The first place at or after `from` where `piece` matches and ends by `end`, or -1. */
function findPiece(piece: string, name: string, from: number, end: number): number {
  for (let at = from; at + piece.length <= end; at++) if (pieceAt(piece, name, at)) return at;
  return -1;
}
