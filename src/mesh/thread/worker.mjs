// The gossip worker's entry. On Node 20 a worker thread starts without the
// TypeScript loader of its process (neither bin/viiwork.js's register() nor
// the tests' `node --import tsx` reaches it), so it registers tsx itself,
// then loads the TypeScript worker. Plain JavaScript, so it loads either way.
import { register } from 'tsx/esm/api';

register();
await import('./worker.ts');
