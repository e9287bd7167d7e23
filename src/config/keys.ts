/**
 * Client keys (`api.keys_env`, `api.keys_file`): where they are read from and
 * how. One parser for `check`, `serve` and the HTTP layer, so a key file that
 * passes `check` is read the same way by the node.
 *
 * - `api.keys_env` names a variable holding keys separated by commas.
 * - `api.keys_file` is either a YAML key table (SPEC section 12: a mapping
 *   whose `keys` is a list of entries, config/key-spec.ts) or a file with one
 *   key per line, blank lines and lines starting with `#` ignored. A plain
 *   key is an admin key of this node alone (it is not spread over the mesh);
 *   the table's entries seed the mesh-wide key table.
 * - Surrounding whitespace is trimmed; a key with whitespace inside is an
 *   error (no client could send it as a bearer token).
 * - Both may be set: the node accepts the keys of both. Neither: no client keys.
 */
import fs from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { checkKeyFields, type KeySpec } from './key-spec.ts';
import type { Config } from './schema.ts';

export interface KeyProblem {
  /** `api.keys_env`, `api.keys_file`, or the path of a field inside the key table (`api.keys_file: keys[2].limits.tpm`). */
  key: string;
  message: string;
  fix: string;
}

export interface ClientKeys {
  /** Every plain key (keys_env, a one-key-a-line file), deduplicated, in the order found: admin keys of this node. */
  keys: string[];
  /** The entries of a YAML key table, validated; empty for a plain file. */
  table: KeySpec[];
  /** Why a configured source could not be read; empty when all is well. */
  problems: KeyProblem[];
}

/** Keys in a text: one per line (file) or separated by commas (variable). */
export function parseClientKeys(text: string, separator: 'line' | 'comma'): { keys: string[]; bad: number } {
  const parts = separator === 'line' ? text.split(/\r?\n/).filter((l) => !l.trimStart().startsWith('#')) : text.split(',');
  const keys: string[] = [];
  let bad = 0;
  for (const raw of parts) {
    const k = raw.trim();
    if (!k) continue;
    if (/\s/.test(k)) bad++;
    else if (!keys.includes(k)) keys.push(k);
  }
  return { keys, bad };
}

/** The client keys `api` asks for, read from `env` and the file system. */
export function readClientKeys(api: Pick<Config['api'], 'keys_env' | 'keys_file'>, env: NodeJS.ProcessEnv): ClientKeys {
  const keys: string[] = [];
  const table: KeySpec[] = [];
  const problems: KeyProblem[] = [];
  if (api.keys_env) {
    const v = env[api.keys_env];
    if (v === undefined) {
      problems.push({ key: 'api.keys_env', message: `${api.keys_env} is not set`, fix: `export ${api.keys_env}=<key>[,<key>…] before starting viiwork, or set api.keys_env: ""` });
    } else {
      const parsed = parseClientKeys(v, 'comma');
      if (parsed.bad) problems.push({ key: 'api.keys_env', message: `${api.keys_env} holds ${parsed.bad} key(s) with whitespace inside`, fix: 'separate keys with commas; a key cannot contain spaces' });
      keys.push(...parsed.keys);
    }
  }
  if (api.keys_file) {
    let text: string | undefined;
    try {
      text = fs.readFileSync(api.keys_file, 'utf8');
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      problems.push({
        key: 'api.keys_file',
        message: `cannot read ${api.keys_file}: ${code === 'ENOENT' ? 'it does not exist' : code === 'EISDIR' ? 'it is a directory' : (code ?? (err as Error).message)}`,
        fix: 'create the file with one key per line and make it readable by the user viiwork runs as (chmod 600), or set api.keys_file: ""',
      });
    }
    const doc = text === undefined ? undefined : tableDocument(text);
    if (doc !== undefined) {
      const t = parseKeyTable(doc);
      for (const p of t.problems) problems.push({ key: `api.keys_file: ${p.path}`, message: `${api.keys_file}: ${p.message}`, fix: p.fix });
      if (!t.problems.length) table.push(...t.entries);
    } else if (text !== undefined) {
      const parsed = parseClientKeys(text, 'line');
      if (parsed.bad) problems.push({ key: 'api.keys_file', message: `${api.keys_file} has ${parsed.bad} line(s) with whitespace inside a key`, fix: 'write one key per line, without spaces' });
      for (const k of parsed.keys) if (!keys.includes(k)) keys.push(k);
    }
  }
  return { keys, table, problems };
}

/** The YAML document of a key table, or undefined when the text is a plain one-key-a-line file. */
function tableDocument(text: string): unknown {
  // A plain key file is never YAML with a top-level `keys:`; one that starts so is a table (and its errors say so).
  if (!/^keys\s*:/m.test(text)) return undefined;
  try {
    return parseYaml(text);
  } catch (err) {
    return { __yaml: (err as Error).message.split('\n')[0] };
  }
}

/** readClientKeys for a node about to start: every problem, with its fix, stops it. */
export function requireClientKeys(api: Pick<Config['api'], 'keys_env' | 'keys_file'>, env: NodeJS.ProcessEnv): ClientKeys {
  const keys = readClientKeys(api, env);
  if (keys.problems.length) throw new Error(keys.problems.map((p) => `${p.key}: ${p.message}; ${p.fix}`).join('\n'));
  return keys;
}

/** A key table document's entries, or the problems of each field by path (`keys[1].role`). Pure. */
export function parseKeyTable(doc: unknown): { entries: KeySpec[]; problems: { path: string; message: string; fix: string }[] } {
  const problems: { path: string; message: string; fix: string }[] = [];
  const fix = 'see docs/configuration.md, "Keys"; viiwork keys add writes a valid entry';
  const d = doc as Record<string, unknown> | null;
  if (d && typeof d.__yaml === 'string') return { entries: [], problems: [{ path: 'keys', message: `is not valid YAML (${d.__yaml})`, fix }] };
  if (typeof d !== 'object' || d === null || Array.isArray(d)) return { entries: [], problems: [{ path: 'keys', message: 'a key table is a mapping with a "keys" list', fix }] };
  for (const k of Object.keys(d)) if (k !== 'keys') problems.push({ path: k, message: `unknown field "${k.slice(0, 40)}"; a key table has only "keys"`, fix });
  if (!Array.isArray(d.keys)) return { entries: [], problems: [...problems, { path: 'keys', message: '"keys" must be a list of key entries', fix }] };
  const entries: KeySpec[] = [];
  const seen = new Map<string, number>();
  d.keys.forEach((raw, i) => {
    const { value, problems: p } = checkKeyFields(raw, { withName: true, needHash: true });
    for (const q of p) problems.push({ path: `keys[${i}]${q.path ? `.${q.path}` : ''}`, message: q.message, fix });
    if (p.length) return;
    const spec = value as KeySpec;
    const first = seen.get(spec.name);
    if (first !== undefined) problems.push({ path: `keys[${i}].name`, message: `duplicate name "${spec.name}" (also keys[${first}])`, fix: 'give every key its own name' });
    else seen.set(spec.name, i);
    const sameHash = entries.find((e) => e.sha256 === spec.sha256);
    if (sameHash) problems.push({ path: `keys[${i}].sha256`, message: `the same hash as key "${sameHash.name}": two names for one secret`, fix: 'make a new key for each name (viiwork keys add)' });
    entries.push(spec);
  });
  return { entries, problems };
}
