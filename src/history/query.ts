/**
 * GET /v1/history's query (docs/api.md): `series` (comma-separated names,
 * default all), `since` (a negative duration back from now, like -15m, or a
 * Unix time in ms; default -15m), `node` and `model` (exact names). Bad
 * input is a 400 that says what would be right; nothing here throws
 * anything else.
 */
import { parseSince } from '../config/units.ts';
import { ApiError } from '../http/errors.ts';
import { isSeriesName, SERIES_NAMES, type SeriesName } from './names.ts';
import type { HistoryQuery } from './store.ts';

const DEFAULT_SINCE_MS = 15 * 60_000;
const NAME_MAX = 256;

const bad = (message: string) => new ApiError(400, message, 'invalid_request_error', 'invalid_history_query');

/** The query of `params` at `now`, for a history that keeps `keepMs`; throws a 400 ApiError naming the fix. */
export function parseHistoryQuery(params: URLSearchParams, now: number, keepMs: number): HistoryQuery {
  const hours = `${keepMs / 3_600_000} h`;
  const names = new Set<SeriesName>();
  const listed = params.get('series');
  if (listed === null || listed.trim() === '') for (const n of SERIES_NAMES) names.add(n);
  else {
    for (const raw of listed.split(',')) {
      const n = raw.trim();
      if (!isSeriesName(n)) throw bad(`unknown series "${n.slice(0, 60)}"; the series are ${SERIES_NAMES.join(', ')} (docs/api.md)`);
      names.add(n);
    }
  }
  const since = sinceOf(params.get('since'), now, keepMs, hours);
  const q: HistoryQuery = { names, since };
  for (const key of ['node', 'model'] as const) {
    const v = params.get(key);
    if (v === null || v === '') continue;
    if (v.length > NAME_MAX) throw bad(`${key} is longer than ${NAME_MAX} characters; name one ${key} exactly`);
    q[key] = v;
  }
  return q;
}

function sinceOf(text: string | null, now: number, keepMs: number, hours: string): number {
  if (text === null || text.trim() === '') return now - DEFAULT_SINCE_MS;
  const t = text.trim();
  const r = parseSince(t, now);
  if ('problem' in r) throw bad(r.problem);
  if (r.ms > now) throw bad(`since=${t.slice(0, 40)} is in the future; give a time up to now, or a span back from now like -15m`);
  if (now - r.ms > keepMs) throw bad(`since=${t.slice(0, 40)} is further back than the ${hours} this node keeps; ask for since=-6h or less`);
  return r.ms;
}
