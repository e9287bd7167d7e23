#!/usr/bin/env node
// Compiles src/ to plain JavaScript in dist/ (same layout, one file for one
// file, relative `.ts` imports rewritten to `.js`, other files copied), so
// a node starts without tsx's loader: that loader costs every process
// about 0.7 s of CPU at start and a defineProperty on every named closure
// it makes afterwards. Types are not checked here (`npm run build` does).
//
// `npm ci` runs it (the `prepare` script) and `npm test` too (`pretest`);
// it does nothing when dist/ is already up to date. bin/viiwork.js runs
// dist/ only while it is as new as src/ (dist/.stamp), and src/ through
// tsx otherwise, so an edit is never shadowed by an older build.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { transform } from 'esbuild';
import { sourceStamp, STAMP } from './stamp.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const src = path.join(root, 'src');
const dist = path.join(root, 'dist');

// `from './x.ts'`, `import './x.ts'`, `import('./x.ts')`, `export … from './x.ts'`: relative specifiers only.
const SPECIFIER = /(\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)(['"])(\.\.?\/[^'"\n]*?)\.ts\2/g;

export async function compile({ force = false } = {}) {
  return compileTree(src, dist, { force });
}

/**
 * `from` compiled to `to`, one file for one file (`.ts` to `.js`, relative
 * `.ts` specifiers rewritten; other files copied), unless `to` already holds
 * a build of `from` as it is now (its stamp). `to` is emptied first.
 */
export async function compileTree(from, to, { force = false } = {}) {
  const stamp = sourceStamp(from);
  if (!force && readStamp(to) === stamp.text) return { compiled: 0, upToDate: true };
  fs.rmSync(to, { recursive: true, force: true });
  let compiled = 0;
  for (const rel of stamp.files) {
    const file = path.join(from, rel);
    if (rel.endsWith('.ts') && !rel.endsWith('.d.ts')) {
      const out = path.join(to, rel.slice(0, -3) + '.js');
      const code = fs.readFileSync(file, 'utf8');
      const js = await transform(code, { loader: 'ts', format: 'esm', platform: 'node', target: 'node20', sourcefile: file });
      fs.mkdirSync(path.dirname(out), { recursive: true });
      fs.writeFileSync(out, js.code.replace(SPECIFIER, (_m, lead, q, spec) => `${lead}${q}${spec}.js${q}`));
      compiled++;
    } else if (!rel.endsWith('.d.ts')) {
      const out = path.join(to, rel);
      fs.mkdirSync(path.dirname(out), { recursive: true });
      fs.copyFileSync(file, out);
    }
  }
  // Written last: a build cut short leaves no stamp, so it is never run.
  fs.writeFileSync(path.join(to, STAMP), stamp.text);
  return { compiled, upToDate: false };
}

function readStamp(dir) {
  try {
    return fs.readFileSync(path.join(dir, STAMP), 'utf8');
  } catch {
    return undefined;
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const t0 = performance.now();
  const r = await compile({ force: process.argv.includes('--force') });
  if (!r.upToDate) console.error(`compiled ${r.compiled} files of src/ to dist/ in ${Math.round(performance.now() - t0)} ms`);
}
