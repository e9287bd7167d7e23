#!/usr/bin/env node
// Compiles the tests (test/, and bench/lib/ which some of them import) to
// plain JavaScript in .test-build/, the repository's layout, with src/
// there a link to dist/ (bin/compile.mjs): `npm test` then runs every test
// file without tsx's loader, which costs each of its 225-odd processes about
// half a second of CPU at start and slows every closure it makes after
// (README, and docs/decisions.md "Compiled tests"). `npm test` runs it first;
// nothing is done while .test-build/ is a build of the sources as they are.
// Types are not checked here (`npm run build` does).
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { compile, compileTree } from './compile.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const TEST_BUILD = path.join(root, '.test-build');

export async function compileTests() {
  const src = await compile();
  const test = await compileTree(path.join(root, 'test'), path.join(TEST_BUILD, 'test'));
  const bench = await compileTree(path.join(root, 'bench/lib'), path.join(TEST_BUILD, 'bench/lib'));
  // What compiled tests reach by relative paths outside test/: the compiled sources, the CLI, the Go peer's source.
  for (const [name, target] of [['src', '../dist'], ['bin', '../bin'], ['tools', '../tools']]) {
    const at = path.join(TEST_BUILD, name);
    if (linkOf(at) === target) continue;
    fs.rmSync(at, { recursive: true, force: true });
    fs.symlinkSync(target, at);
  }
  return { compiled: src.compiled + test.compiled + bench.compiled };
}

function linkOf(at) {
  try {
    return fs.readlinkSync(at);
  } catch {
    return undefined;
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const t0 = performance.now();
  const r = await compileTests();
  if (r.compiled) console.error(`compiled ${r.compiled} files of src/, test/ and bench/lib/ in ${Math.round(performance.now() - t0)} ms`);
}
