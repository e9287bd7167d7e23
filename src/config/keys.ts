/**
 * Client keys (`api.keys_env`, `api.keys_file`): where they are read from and
 * how. One parser for `check`, `serve` and the HTTP layer, so a key file that
 * passes `check` is read the same way by the node.
 *
 * - `api.keys_env` names a variable holding keys separated by commas.
 * - `api.keys_file` is a file with one key per line; blank lines and lines
 *   starting with `#` are ignored.
 * - Surrounding whitespace is trimmed; a key with whitespace inside is an
 *   error (no client could send it as a bearer token).
 * - Both may be set: the node accepts the keys of both. Neither: no client keys.
 */
import fs from 'node:fs';
import type { Config } from './schema.ts';

export interface KeyProblem {
  key: 'api.keys_env' | 'api.keys_file';
  message: string;
  fix: string;
}

export interface ClientKeys {
  /** Every configured key, deduplicated, in the order found. */
  keys: string[];
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
    if (text !== undefined) {
      const parsed = parseClientKeys(text, 'line');
      if (parsed.bad) problems.push({ key: 'api.keys_file', message: `${api.keys_file} has ${parsed.bad} line(s) with whitespace inside a key`, fix: 'write one key per line, without spaces' });
      for (const k of parsed.keys) if (!keys.includes(k)) keys.push(k);
    }
  }
  return { keys, problems };
}
