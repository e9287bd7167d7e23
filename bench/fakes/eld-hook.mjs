// Bench-only preload (NODE_OPTIONS=--import=<this file>): every 100 ms the
// process appends its event-loop delay max over that window to
// $VW_ELD_FILE as "<unix ms> <max ms>\n". Nothing in src/ knows of it.
import fs from 'node:fs';
import { monitorEventLoopDelay } from 'node:perf_hooks';

const file = process.env.VW_ELD_FILE;
if (file) {
  const h = monitorEventLoopDelay({ resolution: 5 });
  h.enable();
  setInterval(() => {
    fs.appendFileSync(file, `${Date.now()} ${(h.max / 1e6).toFixed(1)}\n`);
    h.reset();
  }, 100).unref();
}
