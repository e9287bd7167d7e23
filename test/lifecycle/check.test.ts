/** `viiwork check` on the lifecycle keys (SPEC section 11): a model that can never fit this node's budget is a warning naming both figures. */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { stringify } from 'yaml';
import { writeTinyGguf } from '../fakes/tiny-gguf.ts';
import { tempDir } from '../helpers/node.ts';

const run = promisify(execFile);
const BIN = path.resolve('bin/viiwork.js');

describe('viiwork check: memory', () => {
  it('warns, naming both figures, about a model bigger than the budget; memory: auto read from the GGUF', async () => {
    const dir = tempDir('od-check');
    const gguf = writeTinyGguf(path.join(dir, 'tiny.gguf'));
    const file = path.join(dir, 'viiwork.yaml');
    fs.writeFileSync(
      file,
      stringify({
        node: { name: 'chk', state_dir: path.join(dir, 'state'), memory_budget: '40MiB' },
        mesh: { open: true, network: 'lan', mdns: false, advertise: '127.0.0.1' },
        models: [
          { name: 'big', engine: 'sim', load: 'on_demand', memory: '8GiB' },
          { name: 'ok', engine: 'sim', load: 'on_demand', memory: '10MiB' },
          { name: 'tiny', engine: 'llamacpp', path: gguf, load: 'on_demand', memory: 'auto', parallel: 1, context: 256, llamacpp: { binary: '/bin/true' } },
          { name: 'tiny-no-pool', engine: 'llamacpp', path: gguf, load: 'on_demand', memory: 'auto', parallel: 1, context: 256, cache_ram: 0, llamacpp: { binary: '/bin/true' } },
        ],
      }),
    );
    const r = await run(process.execPath, [BIN, 'check', '--config', file, '--no-ports', '--json']);
    const doc = JSON.parse(r.stdout);
    assert.equal(doc.ok, true, 'warnings only');
    const mem = doc.findings.filter((f: any) => f.key.endsWith('.memory'));
    assert.equal(mem.length, 3, JSON.stringify(doc.findings));
    assert.equal(mem[0].key, 'models[0].memory');
    assert.match(mem[0].message, /big needs 8\.0 GiB but node\.memory_budget is 40\.0 MiB \(node\.memory_budget\): it can never load here/);
    // tiny: 0.49 MiB weights + 0.06 MiB KV (256 tokens) + 64 MiB margin + 5% of the rest, and the RAM prompt cache
    // llama-server may fill (cache_ram, 8,192 MiB by default: issue 41).
    assert.equal(mem[1].key, 'models[2].memory');
    assert.match(mem[1].message, /tiny needs 8\.1 GiB but node\.memory_budget is 40\.0 MiB/);
    assert.match(mem[2].message, /tiny-no-pool needs 64\.6 MiB but node\.memory_budget is 40\.0 MiB/, 'cache_ram: 0, no pool');
  });
});
