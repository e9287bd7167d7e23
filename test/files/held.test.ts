/**
 * Issue 44 item 6, the parts below the node: which file a verified copy's
 * record names (files/held.ts samePin), a copy held open so an engine reads
 * it whatever is put under its name later (HeldCopies), and a fetch whose
 * record pins the file it hashed even when another file takes its name
 * between the rename and the record.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { fetchFile } from '../../src/files/fetch.ts';
import { FileIndex } from '../../src/files/hash-index.ts';
import { fdPath, HeldCopies, samePin } from '../../src/files/held.ts';
import { tempDir } from '../helpers/node.ts';

const dirs: string[] = [];
after(() => {
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
});
const BYTES = crypto.randomBytes(64 * 1024);
const SHA = crypto.createHash('sha256').update(BYTES).digest('hex');
const OTHER = Buffer.from(BYTES.map((b) => b ^ 0x5a));

/** Other bytes of the same size and mtime renamed over `file`, as `cp -p` then `mv` does. */
function plant(file: string): void {
  const st = fs.statSync(file);
  fs.writeFileSync(`${file}.tmp`, OTHER);
  fs.utimesSync(`${file}.tmp`, st.atime, st.mtime);
  fs.renameSync(`${file}.tmp`, file);
}

describe('the file a record names', () => {
  const pin = { size: 10, mtimeMs: 1000.5, ino: 7, ctimeMs: 2000.25 };
  const cases: [string, { size: number; mtimeMs: number; ino: number; ctimeMs: number }, boolean][] = [
    ['the same file', { ...pin }, true],
    ['another size', { ...pin, size: 11 }, false],
    ['another mtime', { ...pin, mtimeMs: 1000.6 }, false],
    ['another inode (a file renamed into place)', { ...pin, ino: 8 }, false],
    ['another ctime (rewritten in place, its mtime put back)', { ...pin, ctimeMs: 2000.5 }, false],
  ];
  for (const [what, st, same] of cases) it(`${what}: ${same ? 'is' : 'is not'} the pinned file`, () => assert.equal(samePin(st, pin), same));
  it('a record that pins no inode (a hashed, not fetched, file) names it by size and mtime', () => {
    assert.equal(samePin({ ...pin, ino: 99, ctimeMs: 1 }, { size: 10, mtimeMs: 1000.5 }), true);
  });
});

describe('a verified copy held open', () => {
  it('what an engine opens through the held path is the verified file, after another is put under its name', () => {
    const dir = tempDir('vw-held-');
    dirs.push(dir);
    const file = path.join(dir, 'm.gguf');
    fs.writeFileSync(file, BYTES);
    const st = fs.statSync(file);
    const held = new HeldCopies();
    const load = held.open(file, st);
    assert.ok(load);
    if (fdPath(0)) assert.match(load, /^\/proc\/\d+\/fd\/\d+$/);
    plant(file);
    if (fdPath(0)) assert.ok(fs.readFileSync(load).equals(BYTES), 'the held path reads the verified bytes');
    assert.equal(held.open(file, st), undefined, 'the impostor under the name is taken for the pinned file');
    assert.equal(new HeldCopies().open(file, st), undefined, 'the impostor under the name is taken for the pinned file');
    held.close();
  });
});

describe('a fetch whose name is taken between its rename and its record', () => {
  it('the record pins the file that was hashed; the impostor is not vouched for', async () => {
    const dir = tempDir('vw-held-fetch-');
    dirs.push(dir);
    const server = http.createServer((req, res) => {
      res.writeHead(200, { 'content-length': BYTES.length });
      res.end(BYTES);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.176.1', r));
    const api = `http://127.0.176.1:${(server.address() as AddressInfo).port}`;
    const dest = path.join(dir, 'models', 'm.gguf');
    try {
      const r = await fetchFile({
        sha256: SHA,
        size: BYTES.length,
        dest,
        modelsDir: path.join(dir, 'models'),
        sources: [{ name: 'a', api }],
        headers: () => ({}),
        reserve: 0,
        // The fetch logs the moment after its rename: the impostor lands there, before anyone records the copy.
        log: (msg) => {
          if (msg.startsWith('fetched ')) plant(dest);
        },
      });
      await r.flushed;
      assert.notEqual(fs.statSync(dest).ino, r.stat.ino, 'the name holds the impostor now');
      const index = new FileIndex({ stateDir: path.join(dir, 'state') });
      index.record(r.path, r.sha256, r.flushed, r.stat);
      assert.equal(index.fetchedCopy(dest), undefined, 'the impostor is vouched for as the fetched copy');
      const held = new HeldCopies();
      const load = held.adopt(r.path, r.fd, r.stat);
      if (fdPath(0)) assert.ok(fs.readFileSync(load).equals(BYTES), 'the engine’s path reads the verified bytes');
      held.close();
      await index.stop();
    } finally {
      server.close();
    }
  });
});
