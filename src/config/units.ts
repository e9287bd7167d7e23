/** Parsing of the human units the config file uses: durations and byte sizes. */

const DURATION = /^(\d+(?:\.\d+)?)(ms|s|m|h)$/;
const DURATION_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** "500ms", "20s", "10m", "1h" → milliseconds; undefined when malformed. */
export function parseDuration(text: string): number | undefined {
  const m = DURATION.exec(text.trim());
  if (!m) return undefined;
  return Math.round(Number(m[1]) * DURATION_MS[m[2]]);
}

const SIZE = /^(\d+(?:\.\d+)?)\s*(B|KB|KiB|MB|MiB|GB|GiB|K|M|G)?$/i;
const SIZE_BYTES: Record<string, number> = {
  b: 1, k: 1024, kb: 1000, kib: 1024, m: 1024 ** 2, mb: 1000 ** 2, mib: 1024 ** 2, g: 1024 ** 3, gb: 1000 ** 3, gib: 1024 ** 3,
};

/** "32MiB", "512KB", "1048576" → bytes; undefined when malformed. */
export function parseSize(text: string): number | undefined {
  const m = SIZE.exec(text.trim());
  if (!m) return undefined;
  return Math.round(Number(m[1]) * SIZE_BYTES[(m[2] ?? 'b').toLowerCase()]);
}
