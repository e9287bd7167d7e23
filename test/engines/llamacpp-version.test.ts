/**
 * llama-server's version and its KV cache report, in every format it has
 * printed them (b4748 of February 2025 and today's, of September 2026): a
 * squashed source's "build 1" is an unknown build, never an old one.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseKvLine } from '../../src/engines/llamacpp/kv-log.ts';
import { describeVersion, parseBuildInfo, parseVersionOutput } from '../../src/engines/llamacpp/version.ts';

const MIB = 1024 * 1024;

describe('llama-server version strings', () => {
  it('reads --version in the old and today\'s format', () => {
    assert.deepEqual(parseVersionOutput('version: 4748 (c392e50)\nbuilt with cc (Debian 12.2.0-14+deb12u1) 12.2.0 for x86_64-linux-gnu'), { commit: 'c392e50', rawBuild: 4748, build: 4748 });
    assert.deepEqual(parseVersionOutput('version: 0.5.0-dev (build 1, commit de3ff81)\nbuilt with GNU 12.2.0 for Linux x86_64'), { version: '0.5.0-dev', commit: 'de3ff81', rawBuild: 1 });
    assert.deepEqual(parseVersionOutput('version: 0.6.1 (build 9120, commit 0abc123)'), { version: '0.6.1', commit: '0abc123', rawBuild: 9120, build: 9120 });
    assert.deepEqual(parseVersionOutput('version: 0.5.0-dev (build unknown, commit unknown)'), { version: '0.5.0-dev', commit: 'unknown' });
    assert.equal(parseVersionOutput('llama-server: command not found'), undefined);
  });

  it('reads /props build_info; build 1 (squashed) and 0 (no git) are unknown builds', () => {
    assert.equal(parseBuildInfo('b4748-c392e50')?.build, 4748);
    assert.equal(parseBuildInfo('b1-de3ff81')?.build, undefined);
    assert.equal(parseBuildInfo('b1-de3ff81')?.rawBuild, 1);
    assert.equal(parseBuildInfo('b0-unknown')?.build, undefined);
    assert.equal(parseBuildInfo('unknown'), undefined);
  });

  it('says the version the way an operator reads it', () => {
    assert.equal(describeVersion(parseVersionOutput('version: 4748 (c392e50)')!), 'build b4748-c392e50');
    assert.equal(describeVersion(parseVersionOutput('version: 0.5.0-dev (build 1, commit de3ff81)')!), 'version 0.5.0-dev, commit de3ff81');
    assert.equal(describeVersion(parseVersionOutput('version: 0.6.1 (build 9120, commit 0abc123)')!), 'version 0.6.1, build 9120, commit 0abc123');
  });
});

describe('the KV cache size llama-server reports', () => {
  it('b4748 at default verbosity', () => {
    const r = parseKvLine('llama_init_from_model: KV self size  =    1.00 MiB, K (f16):    0.50 MiB, V (f16):    0.50 MiB');
    assert.deepEqual(r, { bytes: MIB, form: 'kv-self-size', resolution: 0.01 * MIB });
  });

  it('today\'s build at -lv 4, after its timestamp and level prefix; never the per-device buffer lines', () => {
    const r = parseKvLine('0.00.031.041 I llama_kv_cache: size =    0.25 MiB (   512 cells,   2 layers,  1/1 seqs), K (f16):    0.12 MiB, V (f16):    0.12 MiB');
    assert.deepEqual(r, { bytes: 0.25 * MIB, form: 'kv-cache-size', resolution: 0.01 * MIB });
    assert.equal(parseKvLine('0.00.031.000 I llama_kv_cache:        CPU KV buffer size =     0.25 MiB'), undefined);
    assert.equal(parseKvLine('srv  log_server_r: request: GET /health 127.0.0.1 200'), undefined);
  });

  it('today\'s --log-jsonl record: the context column, in whole MiB', () => {
    const line = '{"type":"fit_memory_breakdown","data":{"unit":"MiB","rows":[{"kind":"host","name":"Host","self":3,"model":0,"context":1,"compute":2}]}}';
    assert.deepEqual(parseKvLine(line), { bytes: MIB, form: 'jsonl', resolution: MIB });
    assert.equal(parseKvLine('{"type":"fit_memory_breakdown", broken'), undefined);
  });
});
