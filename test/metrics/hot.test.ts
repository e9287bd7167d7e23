import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Counter, Histogram, Registry } from 'prom-client';
import { HotCounter, HotHistogram } from '../../src/metrics/hot.ts';

// The request path's counters and histograms must scrape exactly as prom-client's own would: dashboards and alerts read these lines.
test('hot counters and histograms scrape byte for byte as prom-client', async () => {
  const theirs = new Registry();
  const ours = new Registry();
  const defs = { name: 'x_requests_total', help: 'requests by "model"\nand outcome', labelNames: ['model', 'outcome'] as const };
  const hdefs = { name: 'x_seconds', help: 'time', labelNames: ['op', 'model', 'error_type'] as const, buckets: [0.1, 0.5, 1, 10] };
  const bare = { name: 'x_wait_seconds', help: 'wait', buckets: [0.01, 1] };
  const c1 = new Counter({ ...defs, registers: [theirs] });
  const c2 = new HotCounter({ ...defs, registers: [ours] });
  const h1 = new Histogram({ ...hdefs, registers: [theirs] });
  const h2 = new HotHistogram({ ...hdefs, registers: [ours] });
  const b1 = new Histogram({ ...bare, registers: [theirs] });
  const b2 = new HotHistogram({ ...bare, labelNames: [] as const, registers: [ours] });
  assert.equal(await ours.metrics(), await theirs.metrics(), 'before any update');
  for (const [model, outcome, n] of [['a', 'ok', 1], ['b "quoted"\\', 'ok', 3], ['a', 'ok', 2], ['a', 'error', 1]] as const) {
    c1.inc({ model, outcome }, n);
    c2.inc({ model, outcome }, n);
  }
  for (const [v, err] of [[0.05, undefined], [0.5, undefined], [0.7, 'timeout'], [12, undefined], [1, undefined]] as const) {
    const labels = err === undefined ? { op: 'chat', model: 'm' } : { op: 'chat', model: 'm', error_type: err };
    h1.observe(labels, v);
    h2.observe(labels, v);
    b1.observe(v);
    b2.observe({}, v);
  }
  assert.equal(await ours.metrics(), await theirs.metrics());
  assert.match(await ours.metrics(), /^x_seconds_bucket\{le="0\.5",op="chat",model="m"\} 2$/m);
});

test('a counter never falls and ignores what is not a number', async () => {
  const r = new Registry();
  const c = new HotCounter({ name: 'y_total', help: 'y', labelNames: ['k'] as const, registers: [r] });
  c.inc({ k: 'a' }, 5);
  c.inc({ k: 'a' }, -2);
  c.inc({ k: 'a' }, Number.NaN);
  c.inc({ k: 'a' });
  assert.match(await r.metrics(), /^y_total\{k="a"\} 6$/m);
  assert.deepEqual((await c.get()).values, [{ labels: { k: 'a' }, value: 6 }]);
});
