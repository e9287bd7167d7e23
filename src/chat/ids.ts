/** Ids a translation makes for its answer, when the client gave none to reuse. */
import { randomBytes } from 'node:crypto';

/** `prefix_` and 48 hex digits (`resp_…`, `msg_…`), from `random` (tests pass a fixed one). */
export function randomId(prefix: string, random: (n: number) => Buffer = randomBytes): string {
  return `${prefix}_${random(24).toString('hex')}`;
}
