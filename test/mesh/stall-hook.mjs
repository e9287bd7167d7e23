// Test-only preload for `viiwork serve` (NODE_OPTIONS=--import=<this file>),
// used by gossip-isolation.test.ts; nothing in src/ knows of it. Two routes
// on the node's own HTTP server, every other request goes to the node's
// handler untouched:
//
// GET /__test/stall?ms=N  stalls the thread that serves the API for N ms
//   inside a request handler: a busy loop, as a CPU-bound handler (or a long
//   GC pause) would.
// GET /__test/end-workers  terminates every worker thread the process
//   started (the gossip thread): a crash of the engine, seen from the node.
import http from 'node:http';
import { createRequire, syncBuiltinESMExports } from 'node:module';

const require = createRequire(import.meta.url);
const threads = require('node:worker_threads');
const workers = new Set();
const Worker = threads.Worker;
// Remember each worker; it behaves exactly as before.
threads.Worker = class extends Worker {
  constructor(...args) {
    super(...args);
    workers.add(this);
    this.once('exit', () => workers.delete(this));
  }
};
syncBuiltinESMExports();

const emit = http.Server.prototype.emit;
http.Server.prototype.emit = function (event, ...args) {
  if (event === 'request') {
    const [req, res] = args;
    const m = /^\/__test\/stall\?ms=(\d+)$/.exec(req.url ?? '');
    if (m) {
      const ms = Number(m[1]);
      const started = Date.now();
      let spins = 0;
      while (Date.now() - started < ms) spins++;
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ stalledMs: Date.now() - started, spins }));
      return true;
    }
    if (req.url === '/__test/end-workers') {
      const n = workers.size;
      for (const w of workers) void w.terminate();
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ terminated: n }));
      return true;
    }
  }
  return emit.call(this, event, ...args);
};
