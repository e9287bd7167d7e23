/**
 * A point in time as every endpoint and CLI flag takes it (`since=` of
 * `/v1/usage` and `/v1/history`, `viiwork usage --since`), parsed here once
 * (issue 44: `-15m` worked on one endpoint and was a 400 on the other):
 *
 * - a span back from now, with or without a leading minus: `15m`, `-1h`,
 *   `7d`, `90s`, `500ms`;
 * - epoch ms: digits;
 * - an ISO date or date-time: `2026-12-04`, `2026-12-04T10:00:00Z`.
 *
 * Pure: the clock is given. Each endpoint then holds the time to its own
 * range (what it keeps); a time past what a date can hold is refused here.
 */
import { parseDuration } from '../config/units.ts';

/** The latest time a JavaScript date holds (ECMA-262 §21.4.1.1). */
const MAX_DATE_MS = 8.64e15;
const DAYS = /^(\d+(?:\.\d+)?)\s*d$/;

export const SINCE_FORMS = 'a span back from now (15m, -1h, 7d), ms since the epoch, or an ISO date';

/** ms since the epoch, or why the text is none of the forms. */
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
