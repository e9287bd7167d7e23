#!/usr/bin/env node
// The CLI runs the TypeScript sources directly through tsx, so `npm ci` is
// the whole install: no build step stands between a checkout and a node.
import { register } from 'tsx/esm/api';
register();
await import('../src/cli/main.ts');
