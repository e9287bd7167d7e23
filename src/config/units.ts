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

/**
 * A point in time as every endpoint and CLI flag takes it (`since=` of
 * `/v1/usage` and `/v1/history`, `viiwork usage --since`), parsed here once
 * (issue 44: `-15m` worked on one endpoint and was a 400 on the other): a
 * span back from now with or without a leading minus (`15m`, `-1h`, `7d`,
 * `90s`, `500ms`); epoch ms (digits); an ISO date or date-time. Pure: the
 * clock is given. Each endpoint then holds the time to its own range.
 */
/** The latest time a JavaScript date holds (ECMA-262 §21.4.1.1). */
const MAX_DATE_MS = 8.64e15;
const DAYS = /^(\d+(?:\.\d+)?)\s*d$/;

export const SINCE_FORMS = 'a span back from now (15m, -1h, 7d), ms since the epoch, or an ISO date';

/** ms since the epoch, or why the text is none of the forms (see the comment above SINCE_FORMS). */
export function parseSince(text: string, nowMs: number): { ms: number } | { problem: string } {
  const t = text.trim();
  const span = t.startsWith('-') ? t.slice(1) : t;
  const days = DAYS.exec(span);
  const back = days ? Math.round(Number(days[1]) * 86_400_000) : parseDuration(span);
  if (back !== undefined && Number.isFinite(back)) return { ms: nowMs - back };
  if (/^\d+$/.test(t)) {
    const ms = Number(t);
    // 400 digits read as Infinity: once answered 200 with "since": null (issue 46).
    if (!Number.isSafeInteger(ms) || ms > MAX_DATE_MS) return { problem: `since "${clip(t)}" is past any date; give ${SINCE_FORMS}` };
    return { ms };
  }
  const at = /^\d{4}-\d{2}-\d{2}/.test(t) ? Date.parse(t) : NaN;
  if (Number.isNaN(at)) return { problem: `since "${clip(t)}" is not ${SINCE_FORMS}` };
  return { ms: at };
}

const clip = (t: string) => (t.length > 40 ? `${t.slice(0, 40)}…` : t);
