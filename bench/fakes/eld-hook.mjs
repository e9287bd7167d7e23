// Bench-only preload (NODE_OPTIONS=--import=<this file>): every 100 ms the
// process appends "<unix ms> <loop delay max ms> <longest GC pause ms>\n"
// over that window to $VW_ELD_FILE. Nothing in src/ knows of it.
import fs from 'node:fs';
import { monitorEventLoopDelay, PerformanceObserver } from 'node:perf_hooks';

const file = process.env.VW_ELD_FILE;
if (file) {
  const h = monitorEventLoopDelay({ resolution: 5 });
  h.enable();
  let gc = 0;
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) gc = Math.max(gc, e.duration);
  }).observe({ entryTypes: ['gc'] });
  setInterval(() => {
    fs.appendFileSync(file, `${Date.now()} ${(h.max / 1e6).toFixed(1)} ${gc.toFixed(1)}\n`);
    h.reset();
    gc = 0;
  }, 100).unref();
}
