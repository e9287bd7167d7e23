/**
 * The slot store's rules (survive/slot-store.ts) against an engine stand-in
 * that answers llama-server's slot save and restore over real HTTP: files
 * stay within node.cache_disk (oldest out first), a file is restored only
 * under the layout that saved it, and no model name reaches outside
 * slot-cache/. The real engine's round trip is in kept-over-restart.test.ts.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { SlotContent } from '../../src/engines/cache-model.ts';
import type { LlamacppBackend } from '../../src/engines/llamacpp/llamacpp.ts';
import { modelDirName, sameLayout, SlotStore, type SlotFingerprint } from '../../src/survive/slot-store.ts';
import { tempDir } from '../helpers/node.ts';

/** Answers POST /slots/{id}?action=save|restore as llama-server does, writing `size` bytes per saved file into `dir()`. */
function engineStandIn(dir: () => string, size: number) {
  const calls: string[] = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://x');
      const id = Number(url.pathname.split('/')[2]);
      const { filename } = JSON.parse(body) as { filename: string };
      const action = url.searchParams.get('action');
      calls.push(`${action} ${id} ${filename}`);
      const file = path.join(dir(), filename);
      if (action === 'save') {
        fs.writeFileSync(file, Buffer.alloc(size, 1));
        res.end(JSON.stringify({ id_slot: id, filename, n_saved: 100, n_written: size }));
      } else if (fs.existsSync(file)) res.end(JSON.stringify({ id_slot: id, filename, n_restored: 100, n_read: size }));
      else res.writeHead(400).end(JSON.stringify({ error: { message: 'Unable to restore slot' } }));
    });
  });
  return { server, calls };
}

const content = (slot: number): SlotContent => ({ slot, links: [{ hash: `h${slot}`, tokens: 100 }], promptLinks: 1, head: -1 });

function backend(model: string, modelPath: string, over: Partial<{ context: number; parallel: number; build: string; index: number }> = {}): LlamacppBackend {
  const index = over.index ?? 0;
  return {
    id: `${model}/${index}`,
    info: { model, index },
    modelPath,
    extraArgs: ['--threads', '1'],
    context: over.context ?? 2048,
    parallel: over.parallel ?? 2,
    buildInfo: over.build ?? 'b1-test',
    authHeaders: () => ({}),
  } as unknown as LlamacppBackend;
}

describe('the slot store', () => {
  const state = tempDir('viiwork-slot-store-');
  const gguf = path.join(state, 'm.gguf');
  fs.writeFileSync(gguf, 'not really a model');
  let current = '';
  const engine = engineStandIn(() => current, 1024 * 1024);
  let url = '';
  before(async () => {
    await new Promise<void>((r) => engine.server.listen(0, '127.0.203.1', () => r()));
    url = `http://127.0.203.1:${(engine.server.address() as AddressInfo).port}`;
  });
  after(() => new Promise<void>((r) => engine.server.close(() => r())));

  it('keeps the files within node.cache_disk, removing the oldest first', async () => {
    const logs: string[] = [];
    const held = new Map<string, SlotContent[]>();
    const restoredInto: string[] = [];
    const store = new SlotStore({
      stateDir: state,
      diskMiB: 3,
      book: { slotContents: (b) => held.get(b.id) ?? [], restored: (b, c) => void restoredInto.push(`${b.id}:${c.slot}`) },
      log: (l) => logs.push(l),
    });
    // Two models, two slots each, 1 MiB per file: four files do not fit in 3 MiB.
    const a = backend('alpha', gguf);
    const b = backend('beta', gguf);
    held.set(a.id, [content(0), content(1)]);
    held.set(b.id, [content(0), content(1)]);
    current = store.dirFor(a)!;
    await store.save(a, url);
    // The older files are older on the disk too, whatever the file system's timestamp resolution.
    for (const f of fs.readdirSync(current)) fs.utimesSync(path.join(current, f), new Date(1000), new Date(1000));
    current = store.dirFor(b)!;
    await store.save(b, url);
    const total = (d: string) => fs.readdirSync(d).filter((f) => f.endsWith('.bin')).length;
    assert.equal(total(store.dirFor(a)!) + total(store.dirFor(b)!), 3, logs.join('\n'));
    assert.equal(total(store.dirFor(b)!), 2, 'the newest files are kept');
    assert.ok(logs.some((l) => /to stay within node.cache_disk \(3 MiB\)/.test(l)));

    // What is left of alpha is restored into its slot and told to the cache model, then removed.
    current = store.dirFor(a)!;
    await store.restore(a, url);
    assert.equal(restoredInto.length, 1);
    assert.match(restoredInto[0], /^alpha\/0:[01]$/);
    assert.equal(total(store.dirFor(a)!), 0);
  });

  it('drops a file saved under another context, --parallel, model file or engine build, and never restores it', async () => {
    const logs: string[] = [];
    const restoredInto: string[] = [];
    const store = new SlotStore({ stateDir: state, diskMiB: 64, book: { slotContents: () => [content(0)], restored: (_b, c) => void restoredInto.push(String(c.slot)) }, log: (l) => logs.push(l) });
    for (const changed of [{ context: 4096 }, { parallel: 4 }, { build: 'b2-test' }]) {
      const saver = backend('gamma', gguf);
      current = store.dirFor(saver)!;
      await store.save(saver, url);
      await store.restore(backend('gamma', gguf, changed), url);
      assert.deepEqual(restoredInto, [], JSON.stringify(changed));
      assert.deepEqual(fs.readdirSync(current), [], 'the dropped file is removed');
    }
    assert.equal(logs.filter((l) => /dropped b0-s0\.bin/.test(l)).length, 3);
    // The same model file rewritten (another size and mtime): dropped too.
    const saver = backend('gamma', gguf);
    await store.save(saver, url);
    fs.appendFileSync(gguf, ' and more');
    await store.restore(backend('gamma', gguf), url);
    assert.deepEqual(restoredInto, []);
    assert.ok(!engine.calls.some((c) => c.startsWith('restore') && c.includes('gamma')));
  });

  it('a zero cache_disk keeps nothing', async () => {
    const store = new SlotStore({ stateDir: state, diskMiB: 0, book: { slotContents: () => [content(0)], restored: () => {} }, log: () => {} });
    assert.equal(store.dirFor(backend('delta', gguf)), undefined);
  });

  it('a model name never reaches outside slot-cache/', () => {
    for (const name of ['..', '../../etc', 'a/b', '.hidden', 'x'.repeat(300)]) {
      const d = modelDirName(name);
      assert.ok(/^[A-Za-z0-9_-][A-Za-z0-9._-]*$/.test(d) && !d.includes('/') && d.length < 80, d);
    }
    assert.notEqual(modelDirName('a/b'), modelDirName('a_b'), 'two names never share a directory');
  });

  it('two layouts match only on the same file, context, parallel, arguments and build', () => {
    const f: SlotFingerprint = { file: { path: '/m.gguf', size: 10, mtimeMs: 5 }, context: 2048, parallel: 2, args: [], build: 'b1' };
    assert.ok(sameLayout(f, { ...f }));
    assert.ok(!sameLayout(f, { ...f, args: ['-ctk', 'q8_0'] }));
    assert.ok(sameLayout({ ...f, file: { ...f.file, sha256: 'ab' } }, { ...f, file: { path: '/elsewhere.gguf', size: 10, mtimeMs: 9, sha256: 'ab' } }), 'the same bytes elsewhere');
    assert.ok(!sameLayout({ ...f, file: { ...f.file, sha256: 'ab' } }, { ...f, file: { ...f.file, sha256: 'cd' } }), 'other bytes under the same path, size and mtime');
  });
});
