// The gossip worker's entry. Compiled (dist/), the worker is plain
// JavaScript beside this file. From the sources, on Node 20 a worker thread
// starts without the TypeScript loader of its process (neither
// bin/viiwork.js's register() nor the tests' `node --import tsx` reaches
// it), so it registers tsx itself, then loads the TypeScript worker.
import fs from 'node:fs';

const ts = new URL('./worker.ts', import.meta.url);
if (fs.existsSync(ts)) {
  const { register } = await import('tsx/esm/api');
  register();
  await import(ts.href);
} else {
  await import(new URL('./worker.js', import.meta.url).href);
}
