/** What the config loader refuses in a YAML text: its problems, each naming a key; fails the test when it accepts it. */
import assert from 'node:assert/strict';
import { ConfigError, parseConfigText } from '../../src/config/load.ts';

export function problems(yaml: string): string[] {
  try {
    parseConfigText(yaml);
  } catch (err) {
    assert.ok(err instanceof ConfigError);
    return err.problems;
  }
  assert.fail('config was accepted');
}
