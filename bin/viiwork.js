#!/usr/bin/env node
// The CLI runs dist/ (src/ compiled to JavaScript by bin/compile.mjs, which
// `npm ci` runs) while dist/ is a build of the sources as they are now, and
// the TypeScript sources through tsx otherwise: `npm ci` is the whole
// install, and an edit to src/ is never shadowed by an older build.
// VIIWORK_FROM_SOURCE=1 runs the sources even when dist/ is current.
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { sourceStamp, STAMP } from './stamp.mjs';

const src = fileURLToPath(new URL('../src', import.meta.url));
const dist = new URL('../dist/', import.meta.url);

function distIsCurrent() {
  if (process.env.VIIWORK_FROM_SOURCE === '1') return false;
  try {
    return fs.readFileSync(new URL(STAMP, dist), 'utf8') === sourceStamp(src).text;
  } catch {
    return false;
  }
}

if (distIsCurrent()) {
  await import(new URL('cli/main.js', dist).href);
} else {
  const { register } = await import('tsx/esm/api');
  register();
  await import('../src/cli/main.ts');
}
