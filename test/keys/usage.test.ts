/** Usage rollups (SPEC section 12): per key and model per hour, merged across hosts, kept 30 days across restarts. */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { parseUsageSince as parseSince } from '../../src/api/usage.ts';
import { usageTable } from '../../src/cli/keys.ts';
import { HOUR_MS, mergeRows, parseRows, UsageBook } from '../../src/keys/usage.ts';

const T0 = Date.UTC(2026, 0, 10, 12, 30);

describe('usage book', () => {
  it('counts requests, errors, limit refusals and tokens per key and model, per hour', () => {
    let now = T0;
    const u = new UsageBook('h1', () => now);
    u.record({ key: 'alice', model: 'm', outcome: 'ok', promptCached: 10, promptUncached: 90, completion: 20 });
    u.record({ key: 'alice', model: 'm', outcome: 'error', promptUncached: 5 });
    u.record({ key: 'alice', model: 'm', outcome: 'limited' });
    now += HOUR_MS;
    u.record({ key: 'bob', model: 'm', outcome: 'ok', completion: 7 });
    assert.deepEqual(u.rows(T0 - HOUR_MS), [
      { key: 'alice', model: 'm', host: 'h1', requests: 2, errors: 1, limited: 1, prompt_cached: 10, prompt_uncached: 95, completion: 20 },
      { key: 'bob', model: 'm', host: 'h1', requests: 1, errors: 0, limited: 0, prompt_cached: 0, prompt_uncached: 0, completion: 7 },
    ]);
    assert.deepEqual(u.rows(T0 - HOUR_MS, 'bob', true).map((r) => [r.key, r.hour]), [['bob', Math.floor(now / HOUR_MS) * HOUR_MS]]);
    assert.deepEqual(u.rows(now + HOUR_MS), [], 'nothing after');
  });

  it('survives a restart, and drops hours older than 30 days', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'viiwork-usage-'));
    let now = T0;
    const u = UsageBook.load('h1', () => now, dir);
    u.record({ key: 'alice', model: 'm', outcome: 'ok', completion: 3 });
    u.save();
    const again = UsageBook.load('h1', () => now, dir);
    assert.equal(again.rows(0)[0].completion, 3);
    now += 31 * 24 * HOUR_MS;
    const later = UsageBook.load('h1', () => now, dir);
    assert.deepEqual(later.rows(0), []);
  });

  it('merges members’ rows by key, model and host; malformed rows are left out', () => {
    const rows = parseRows([
      { key: 'a', model: 'm', host: 'h1', requests: 1, errors: 0, limited: 0, prompt_cached: 0, prompt_uncached: 4, completion: 2 },
      { key: 'a', model: 'm', host: 'h1', requests: 2, completion: 1 },
      { key: 'a', model: 'm', host: 'h2', requests: 5 },
      { key: 7 },
      'junk',
    ]);
    assert.deepEqual(
      mergeRows(rows).map((r) => [r.host, r.requests, r.completion]),
      [
        ['h1', 3, 3],
        ['h2', 5, 0],
      ],
    );
  });

  it('since: a span, a date or ms; anything else is a 400 naming the forms', () => {
    assert.equal(parseSince('24h', T0), T0 - 24 * HOUR_MS);
    assert.equal(parseSince('7d', T0), T0 - 7 * 24 * HOUR_MS);
    assert.equal(parseSince('30m', T0), T0 - 30 * 60_000);
    assert.equal(parseSince('2026-01-01T00:00:00Z', T0), Date.UTC(2026, 0, 1));
    assert.equal(parseSince('12345', T0), 12345);
    assert.equal(parseSince(null, T0), T0 - 24 * HOUR_MS);
    assert.throws(() => parseSince('yesterday', T0), (e: Error & { status?: number }) => e.status === 400 && /7d/.test(e.message));
    // The forms /v1/history takes mean the same here (issue 44).
    assert.equal(parseSince('-1h', T0), T0 - HOUR_MS);
    assert.equal(parseSince('-15m', T0), T0 - 15 * 60_000);
    assert.throws(() => parseSince('9'.repeat(400), T0), (e: Error & { status?: number }) => e.status === 400 && /past any date/.test(e.message));
  });

  it('the CLI table has a row per key, model and host and a total', () => {
    const text = usageTable({ since: T0, missing: ['C'], rows: parseRows([{ key: 'a', model: 'm', host: 'h1', requests: 2, prompt_cached: 1, prompt_uncached: 3, completion: 4 }]) });
    const lines = text.trim().split('\n');
    assert.match(lines[0], /^KEY\s+MODEL\s+HOST\s+REQUESTS/);
    assert.match(lines[1], /^a\s+m\s+h1\s+2\s+0\s+0\s+4\s+1\s+4$/);
    assert.match(lines[2], /^total/);
    assert.match(lines[3], /not answering.*C/);
  });
});
