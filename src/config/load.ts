/** Reading and validating the config file: the whole file or nothing. */
import fs from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { configSchema, describeIssue, formatPath, schemaFix, type Config } from './schema.ts';

/**
 * One thing wrong (or worth a look) in a config: the key it is about, what
 * is wrong, and how to fix it. `error` stops `check` and `serve`; `warning`
 * is reported and the node still starts.
 */
export interface Finding {
  level: 'error' | 'warning';
  /** The key path ("models[1].path"), or an environment variable's name. */
  key: string;
  message: string;
  fix: string;
}

/** "key: message" as the operator reads one finding on one line. */
export function formatFinding(f: Pick<Finding, 'key' | 'message'>): string {
  return `${f.key}: ${f.message}`;
}

export class ConfigError extends Error {
  /** The same problems with their keys and fixes, when known. */
  readonly findings: Finding[];
  constructor(
    message: string,
    readonly problems: string[] = [message],
    findings?: Finding[],
  ) {
    super(message);
    this.name = 'ConfigError';
    this.findings = findings ?? problems.map((p) => ({ level: 'error', key: '(file)', message: p, fix: 'see docs/configuration.md' }));
  }
}

export const DEFAULT_CONFIG_PATHS = ['./viiwork.yaml', '/etc/viiwork/viiwork.yaml'];

/** Which file to read: the one named, else the first default that exists. */
export function resolveConfigPath(explicit?: string): string {
  if (explicit) return explicit;
  const found = DEFAULT_CONFIG_PATHS.find((p) => fs.existsSync(p));
  if (!found) throw new ConfigError(`no config file: pass --config FILE, or create ${DEFAULT_CONFIG_PATHS.join(' or ')} (viiwork init writes one)`);
  return found;
}

/** Validate a parsed document; every problem names its key path. */
export function validateConfig(doc: unknown): Config {
  const result = configSchema.safeParse(doc ?? {});
  if (result.success) return result.data;
  const findings: Finding[] = result.error.issues.flatMap((i) =>
    (i.code === 'unrecognized_keys' ? i.keys.map((k) => [...i.path, k]) : [i.path]).map((p) => {
      const message = i.code === 'unrecognized_keys' ? 'unknown key' : describeIssue(i);
      return { level: 'error' as const, key: formatPath(p), message, fix: schemaFix(p, message) };
    }),
  );
  const problems = findings.map(formatFinding);
  throw new ConfigError(problems.join('\n'), problems, findings);
}

export function parseConfigText(text: string, source = 'config'): Config {
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (err) {
    const message = `not valid YAML: ${(err as Error).message}`;
    throw new ConfigError(`${source}: ${message}`, undefined, [{ level: 'error', key: source, message, fix: 'correct the YAML syntax at the line shown (keys must be unique; indent with spaces)' }]);
  }
  return validateConfig(doc);
}

export function loadConfig(file: string): Config {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    const why = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
    throw new ConfigError(`cannot read config ${file}: ${why}`, undefined, [
      { level: 'error', key: file, message: `cannot read config: ${why}`, fix: 'pass the path of an existing, readable file with --config' },
    ]);
  }
  return parseConfigText(text, file);
}
