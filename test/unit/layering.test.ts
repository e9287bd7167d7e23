/**
 * Issue 8, acceptance 5: imports point inward. Each room sits on a layer and
 * may import only from rooms on lower layers (and from itself); `import type`
 * counts too, so no circle hides behind a type. The layers are also the
 * reading order in docs/architecture.md.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';

/** Lowest first. A room not listed here fails the test until it is placed. */
export const LAYERS: string[][] = [
  ['version', 'log', 'workloads', 'ui', 'hashing', 'chat'],
  ['config', 'http', 'perf'],
  // The prompt's vocabulary (prefix chain, canonical segments, token estimates, what a target holds): read by
  // route/, engines/, capacity/ and dispatch/ alike, so none of them reaches into another for it.
  ['prompt'],
  ['route', 'queue', 'security', 'metrics', 'aliases', 'responses', 'messages', 'keys'],
  ['mesh', 'engines', 'preflight', 'history', 'telemetry'],
  // survive/: a conversation outliving its host (drain, slot caches kept over a restart, a cut stream continued): it
  // drives engines' slot files, and dispatch/ splices its continuations.
  ['lifecycle', 'survive'],
  ['forward', 'capacity'],
  // split/: a model bigger than one host (SPEC 11): lends, the runner's parts, the members-only tunnel.
  ['dispatch', 'files', 'split'],
  ['api'],
  ['node'],
  ['cli'],
];

const SRC = path.resolve('src');

function roomOf(file: string): string {
  const rel = path.relative(SRC, file);
  const first = rel.split(path.sep)[0];
  return first.replace(/\.ts$/, '');
}

function layerOf(room: string): number {
  return LAYERS.findIndex((l) => l.includes(room));
}

function files(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((d) => (d.isDirectory() ? files(path.join(dir, d.name)) : d.name.endsWith('.ts') ? [path.join(dir, d.name)] : []));
}

describe('layering', () => {
  it('every import in src/ points to the same room or a lower layer', () => {
    const problems: string[] = [];
    for (const file of files(SRC)) {
      const room = roomOf(file);
      const layer = layerOf(room);
      if (layer < 0) {
        problems.push(`${path.relative(SRC, file)}: room "${room}" has no layer in test/unit/layering.test.ts`);
        continue;
      }
      const text = fs.readFileSync(file, 'utf8');
      for (const m of text.matchAll(/(?:import|export)[^'"]*?from\s+'(\.[^']+)'|import\('(\.[^']+)'\)/g)) {
        const spec = m[1] ?? m[2];
        const target = path.resolve(path.dirname(file), spec);
        if (!target.startsWith(SRC)) continue;
        const to = roomOf(target);
        if (to === room) continue;
        const toLayer = layerOf(to);
        if (toLayer < 0 || toLayer >= layer) problems.push(`${path.relative(SRC, file)} imports ${to}/ (layer ${toLayer}) from ${room}/ (layer ${layer})`);
      }
    }
    assert.deepEqual(problems, []);
  });

  it('engines/ never imports route/ (the prompt vocabulary sits below both)', () => {
    const problems = files(path.join(SRC, 'engines')).filter((f) => /from\s+'\.\.\/route\//.test(fs.readFileSync(f, 'utf8')));
    assert.deepEqual(problems.map((f) => path.relative(SRC, f)), []);
    assert.ok(layerOf('prompt') < layerOf('route') && layerOf('prompt') < layerOf('engines'));
  });

  it('the check itself notices an upward import', () => {
    assert.ok(layerOf('dispatch') < layerOf('api') && layerOf('api') < layerOf('node'));
  });
});
