/**
 * What a reload (SIGHUP) applies: the model entries and the aliases. Every
 * other section is read once at start, so a change there is named as needing
 * a restart, never half applied.
 */
import type { Config } from './schema.ts';

const RESTART_SECTIONS = ['node', 'api', 'mesh', 'routing', 'telemetry'] as const;

/** The sections of `next` that differ from `current` and only a restart applies. */
export function restartNeeded(current: Config, next: Config): string[] {
  return RESTART_SECTIONS.filter((k) => JSON.stringify(next[k]) !== JSON.stringify(current[k]));
}

/** The config a reload leaves: `current`, with `next`'s model entries and aliases. */
export function reloaded(current: Config, next: Config): Config {
  return { ...current, models: next.models, aliases: next.aliases };
}

/** The role a node gossips (mesh/meta.ts): a node serves models, a gateway none. */
export function roleOf(config: Pick<Config, 'models'>): 'node' | 'gateway' {
  return config.models.length ? 'node' : 'gateway';
}
