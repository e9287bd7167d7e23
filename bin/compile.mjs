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
  const stamp = sourceStamp(src);
  if (!force && readStamp() === stamp.text) return { compiled: 0, upToDate: true };
  fs.rmSync(dist, { recursive: true, force: true });
  let compiled = 0;
  for (const rel of stamp.files) {
    const from = path.join(src, rel);
    if (rel.endsWith('.ts') && !rel.endsWith('.d.ts')) {
      const out = path.join(dist, rel.slice(0, -3) + '.js');
      const code = fs.readFileSync(from, 'utf8');
      const js = await transform(code, { loader: 'ts', format: 'esm', platform: 'node', target: 'node20', sourcefile: from });
      fs.mkdirSync(path.dirname(out), { recursive: true });
      fs.writeFileSync(out, js.code.replace(SPECIFIER, (_m, lead, q, spec) => `${lead}${q}${spec}.js${q}`));
      compiled++;
    } else if (!rel.endsWith('.d.ts')) {
      const out = path.join(dist, rel);
      fs.mkdirSync(path.dirname(out), { recursive: true });
      fs.copyFileSync(from, out);
    }
  }
  // Written last: a build cut short leaves no stamp, so it is never run.
  fs.writeFileSync(path.join(dist, STAMP), stamp.text);
  return { compiled, upToDate: false };
}

function readStamp() {
  try {
    return fs.readFileSync(path.join(dist, STAMP), 'utf8');
  } catch {
    return undefined;
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const t0 = performance.now();
  const r = await compile({ force: process.argv.includes('--force') });
  if (!r.upToDate) console.error(`compiled ${r.compiled} files of src/ to dist/ in ${Math.round(performance.now() - t0)} ms`);
}
