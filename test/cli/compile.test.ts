/**
 * The CLI runs src/ compiled to dist/ (bin/compile.mjs, run by `npm ci` and
 * `npm test`) only while dist/ is a build of the sources as they are; an
 * edited, added or removed source runs from src/ through tsx until the next
 * build, so nobody ever runs code older than what they see. Real
 * bin/viiwork.js, bin/stamp.mjs and bin/compile.mjs, copied beside a small
 * src/ whose CLI says which of the two it runs from.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';

const run = promisify(execFile);
const ROOT = path.resolve('.');

describe('the CLI runs dist/ only while it is current', () => {
  let dir: string;
  const main = () => path.join(dir, 'src/cli/main.ts');
  const cli = async (env: Record<string, string> = {}) => (await run(process.execPath, [path.join(dir, 'bin/viiwork.js')], { env: { ...process.env, ...env }, timeout: 60_000 })).stdout.trim();
  const compile = () => run(process.execPath, [path.join(dir, 'bin/compile.mjs')], { timeout: 60_000 });
  const edit = (file: string, text: string) => {
    fs.writeFileSync(file, text);
    // A second on the clock, so the edit is seen whatever the file system's mtime granularity.
    const t = new Date(Date.now() + 1000);
    fs.utimesSync(file, t, t);
  };

  before(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'viiwork-compile-'));
    fs.mkdirSync(path.join(dir, 'bin'));
    fs.writeFileSync(path.join(dir, 'package.json'), '{ "type": "module" }\n');
    for (const f of ['viiwork.js', 'stamp.mjs', 'compile.mjs']) fs.copyFileSync(path.join(ROOT, 'bin', f), path.join(dir, 'bin', f));
    fs.symlinkSync(path.join(ROOT, 'node_modules'), path.join(dir, 'node_modules'));
    fs.mkdirSync(path.join(dir, 'src/cli'), { recursive: true });
    fs.writeFileSync(path.join(dir, 'src/where.ts'), "export const where: string = import.meta.url.includes('/dist/') ? 'dist' : 'src';\n");
    edit(main(), "import { where } from '../where.ts';\nconsole.log(`v1 from ${where}`);\n");
  });
  after(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('no build yet: the sources, through tsx', async () => {
    assert.equal(await cli(), 'v1 from src');
  });

  it('after a build: the build, with its relative imports rewritten to .js', async () => {
    await compile();
    assert.equal(await cli(), 'v1 from dist');
    assert.match(fs.readFileSync(path.join(dir, 'dist/cli/main.js'), 'utf8'), /from "\.\.\/where\.js"|from '\.\.\/where\.js'/);
    assert.equal(await cli({ VIIWORK_FROM_SOURCE: '1' }), 'v1 from src', 'VIIWORK_FROM_SOURCE=1 runs the sources');
  });

  it('an edited source: the sources again, until the next build', async () => {
    edit(main(), "import { where } from '../where.ts';\nconsole.log(`v2 from ${where}`);\n");
    assert.equal(await cli(), 'v2 from src');
    await compile();
    assert.equal(await cli(), 'v2 from dist');
  });

  it('an added or removed source file: the sources again', async () => {
    edit(path.join(dir, 'src/extra.ts'), 'export const x = 1;\n');
    assert.equal(await cli(), 'v2 from src');
    await compile();
    assert.equal(await cli(), 'v2 from dist');
    fs.rmSync(path.join(dir, 'src/extra.ts'));
    assert.equal(await cli(), 'v2 from src');
  });

  it('a build cut short (no stamp): the sources', async () => {
    await compile();
    fs.rmSync(path.join(dir, 'dist/.stamp'));
    assert.equal(await cli(), 'v2 from src');
  });
});
