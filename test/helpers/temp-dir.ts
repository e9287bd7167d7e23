// Temp dirs for tests, in their own module: the helpers that spawn nodes as
// processes need only this, not the in-process node (node.ts imports all of
// src/, about a second of CPU per test file).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/** The temp dirs this test process made: removed when it exits, so a suite run leaves none behind. */
const madeDirs: string[] = [];

export function tempDir(prefix = 'viiwork-test-'): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  if (madeDirs.length === 0) process.once('exit', removeMadeDirs);
  madeDirs.push(dir);
  return dir;
}

function removeMadeDirs(): void {
  for (const dir of madeDirs) {
    try {
      fs.rmSync(dir, { recursive: true, force: true, maxRetries: 2 });
    } catch {
      // A dir still in use (a child that outlived its test) is left; the exit goes on.
    }
  }
}
