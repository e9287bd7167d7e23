/** Reading and validating the config file: the whole file or nothing. */
import fs from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { configSchema, describeIssue, formatPath, type Config } from './schema.ts';

export class ConfigError extends Error {
  constructor(
    message: string,
    readonly problems: string[] = [message],
  ) {
    super(message);
    this.name = 'ConfigError';
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
  const problems = result.error.issues.flatMap((i) =>
    i.code === 'unrecognized_keys'
      ? i.keys.map((k) => `${formatPath([...i.path, k])}: unknown key`)
      : [`${formatPath(i.path)}: ${describeIssue(i)}`],
  );
  throw new ConfigError(problems.join('\n'), problems);
}

export function parseConfigText(text: string, source = 'config'): Config {
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (err) {
    throw new ConfigError(`${source}: not valid YAML: ${(err as Error).message}`);
  }
  return validateConfig(doc);
}

export function loadConfig(file: string): Config {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigError(`cannot read config ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  return parseConfigText(text, file);
}
