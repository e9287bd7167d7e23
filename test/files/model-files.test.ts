/**
 * files/model-files.ts with a real hash index on a real disk: which copy of
 * an entry's file this node may load when its `path` is not here. Only the
 * copy this node's own verified fetch recorded, and only while it is that
 * very file; a file in models_dir under the same name with the same size
 * and mtime (put there by hand) is not, however it got there.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import type { ModelConfig } from '../../src/config/schema.ts';
import { FileIndex } from '../../src/files/hash-index.ts';
import { ModelFilePolicy } from '../../src/files/model-files.ts';
import { Metrics } from '../../src/metrics/metrics.ts';
import { tempDir } from '../helpers/node.ts';

const dirs: string[] = [];
const metrics = new Metrics();
after(() => {
  metrics.stop();
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
});

const BYTES = crypto.randomBytes(4096);
const SHA = crypto.createHash('sha256').update(BYTES).digest('hex');
const OTHER = Buffer.from(BYTES.map((b) => b ^ 0x5a));

/** A node's models_dir and state_dir, an entry whose path is absent, and a copy of its file in models_dir. */
function setup() {
  const dir = tempDir('vw-copies-');
  dirs.push(dir);
  const modelsDir = path.join(dir, 'models');
  const stateDir = path.join(dir, 'state');
  fs.mkdirSync(modelsDir);
  const copy = path.join(modelsDir, 'm.gguf');
  fs.writeFileSync(copy, BYTES);
  const entry = { name: 'm', engine: 'llamacpp', path: path.join(dir, 'absent', 'm.gguf'), fetch: 'mesh', load: 'on_demand' } as unknown as ModelConfig;
  const policy = (index: FileIndex) =>
    new ModelFilePolicy({
      modelsDir,
      models: () => [entry],
      findsNoMembers: () => false,
      index,
      members: () => [],
      reportOf: () => undefined,
      load: () => ({ kind: 'unknown', model: 'm' }),
      headers: () => ({}),
      dispatcher: () => undefined as never,
      stopping: new AbortController().signal,
      log: () => {},
      metrics,
    });
  return { dir, modelsDir, stateDir, copy, entry, policy };
}

/** The copy as a verified fetch leaves it: recorded, and the record kept across a restart. */
async function fetched(s: ReturnType<typeof setup>): Promise<void> {
  const index = new FileIndex({ stateDir: s.stateDir });
  index.record(s.copy, SHA);
  await index.stop();
}

/** Other bytes of the same size at the copy's path, its mtime (to the nanosecond) put back as `touch -r` does. */
function replaceByHand(copy: string, how: 'renamed' | 'in place'): void {
  const ref = `${copy}.times`;
  fs.writeFileSync(ref, '');
  execFileSync('touch', ['-r', copy, ref]);
  if (how === 'renamed') {
    const tmp = `${copy}.tmp`;
    fs.writeFileSync(tmp, OTHER);
    execFileSync('touch', ['-r', ref, tmp]);
    fs.renameSync(tmp, copy);
  } else {
    fs.writeFileSync(copy, OTHER);
    execFileSync('touch', ['-r', ref, copy]);
  }
  fs.rmSync(ref);
  assert.equal(fs.statSync(copy).size, BYTES.length);
}

describe('which copy of a model file a node may use', () => {
  it('the copy its verified fetch recorded is used, across a restart, and published', async () => {
    const s = setup();
    await fetched(s);
    const policy = s.policy(new FileIndex({ stateDir: s.stateDir }));
    // The engine is given the copy itself: through the descriptor the node holds on it (files/held.ts), or its name without /proc.
    const load = (policy.here(s.entry) as { path: string } | undefined)?.path;
    assert.ok(load === s.copy || /^\/proc\/\d+\/fd\/\d+$/.test(load ?? ''), `loads ${load}`);
    assert.ok(fs.readFileSync(load!).equals(BYTES));
    policy.close();
    assert.equal(policy.fileOf('m')?.sha256, SHA);
  });

  for (const how of ['renamed', 'in place'] as const) {
    it(`a file of the same size and mtime put there by hand (${how}) is not used, nor published under the fetched hash`, async () => {
      const s = setup();
      await fetched(s);
      const mtimeNs = fs.statSync(s.copy, { bigint: true }).mtimeNs;
      replaceByHand(s.copy, how);
      assert.equal(fs.statSync(s.copy, { bigint: true }).mtimeNs, mtimeNs, 'the impostor has the mtime the record names');
      const policy = s.policy(new FileIndex({ stateDir: s.stateDir }));
      assert.equal(policy.here(s.entry), undefined);
      assert.equal(policy.fileOf('m'), undefined);
    });
  }

  it('a file in models_dir that was hashed, not fetched, is not used for an entry whose path is absent', async () => {
    const s = setup();
    const index = new FileIndex({ stateDir: s.stateDir });
    await index.track([s.copy]);
    assert.equal(index.lookup(s.copy)?.sha256, SHA, 'hashed and known');
    assert.equal(s.policy(index).here(s.entry), undefined);
  });

  it('a recorded copy whose hash is not the entry’s sha256 is not used', async () => {
    const s = setup();
    await fetched(s);
    const policy = s.policy(new FileIndex({ stateDir: s.stateDir }));
    assert.equal(policy.here({ ...s.entry, sha256: 'f'.repeat(64) } as ModelConfig), undefined);
  });
});
