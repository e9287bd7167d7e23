/** Where model files are, and where a fetched one goes (SPEC section 11). Pure. */
import path from 'node:path';
import type { ModelConfig } from '../config/schema.ts';

/** The `path` of every entry that names a file (llamacpp, embedded), once each. */
export function modelFilePaths(models: readonly ModelConfig[]): string[] {
  return [...new Set(models.flatMap((m) => ('path' in m ? [m.path] : [])))];
}

/** A fetched copy of `entryPath` lives in models_dir under the same file name. */
export function fetchedPath(modelsDir: string, entryPath: string): string {
  return path.join(modelsDir, path.basename(entryPath));
}

/** The temporary file a fetch writes before it is verified: hidden, named by the hash, so a resume finds it. */
export function partialPath(modelsDir: string, sha256: string): string {
  return path.join(modelsDir, `.${sha256}.part`);
}
