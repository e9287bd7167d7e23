/**
 * A script of the tests that a test runs in its own process (a memberlist
 * child, an mDNS node, a fake that exits): named by its `.ts` source, run as
 * `node` runs it here: compiled beside this file when the tests run compiled
 * (bin/compile-tests.mjs, `npm test`), else the source through tsx.
 */
import { fileURLToPath } from 'node:url';

const compiled = import.meta.url.endsWith('.js');

/** The arguments to `node` before the script's own: the script, and tsx's loader when it is TypeScript. */
export function scriptArgs(source: string | URL): string[] {
  const file = source instanceof URL ? fileURLToPath(source) : source;
  return compiled ? [file.replace(/\.ts$/, '.js')] : ['--import', 'tsx', file];
}
