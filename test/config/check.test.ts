/**
 * `viiwork check` and `viiwork serve` refuse the same broken configs, naming
 * the key: a table of broken files run through the preflight in process (the
 * function both commands call), then a few through the real binaries.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { describe, it, before, after } from 'node:test';
import { promisify } from 'node:util';
import { stringify } from 'yaml';
import { ConfigError } from '../../src/config/load.ts';
import { checkConfigFile, loadCheckedConfig, probePorts } from '../../src/preflight/preflight.ts';
import { parseConfigText } from '../../src/config/load.ts';
import { tempDir } from '../helpers/node.ts';

const run = promisify(execFile);
const BIN = path.resolve('bin/viiwork.js');

const dir = tempDir('viiwork-check-');
const GGUF = path.join(dir, 'model.gguf');
const NOT_GGUF = path.join(dir, 'model.bin');
const FAKE_BIN = path.join(dir, 'llama-server');
const NOT_EXEC = path.join(dir, 'not-exec');
const KEYS = path.join(dir, 'keys');
const EMPTY_KEYS = path.join(dir, 'empty-keys');
const A_FILE = path.join(dir, 'a-file');
const SECRET = crypto.randomBytes(32).toString('base64');

/** The environment a test node runs with: no mesh secrets, PATH kept, plus `extra`. */
function envWith(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const k of Object.keys(env)) if (k.startsWith('VIIWORK_')) delete env[k];
  return { ...env, ...extra };
}

type Doc = Record<string, any>;

/** A config that passes every check; each case breaks one thing in a copy of it. */
function baseDoc(): Doc {
  return {
    node: { name: 'checked', state_dir: path.join(dir, 'state') },
    api: { host: '127.0.0.1', port: 0 },
    mesh: { open: true, network: 'lan', mdns: false, advertise: '127.0.0.1', port: 0 },
    models: [{ name: 'sim-chat', engine: 'sim', parallel: 2, workloads: ['chat', 'completion'] }],
  };
}

const llama = (extra: Doc = {}): Doc => ({ name: 'llama', engine: 'llamacpp', path: GGUF, llamacpp: { binary: FAKE_BIN, args: [] }, ...extra });
const withModels = (...models: Doc[]) => (d: Doc) => void (d.models = models);

interface Case {
  name: string;
  /** The key path (or variable) the error must name; a finding's key may extend it (`models[0].workloads` → `…[0]`). */
  key: string;
  edit?: (d: Doc) => void;
  /** Raw YAML instead of an edited base document. */
  yaml?: string;
  env?: Record<string, string>;
}

const CASES: Case[] = [
  // unknown keys
  { name: 'unknown top-level key', key: 'apii', edit: (d) => void (d.apii = {}) },
  { name: 'misspelt api key', key: 'api.alowed_hosts', edit: (d) => void (d.api.alowed_hosts = []) },
  { name: 'another engine’s key on a sim entry', key: 'models[0].url', edit: (d) => void (d.models[0].url = 'http://127.0.0.1:9100') },
  { name: 'unknown engine', key: 'models[0].engine', edit: (d) => void (d.models[0].engine = 'vllm') },
  { name: 'misspelt llamacpp sub-key', key: 'models[0].llamacpp.binray', edit: withModels(llama({ llamacpp: { binray: FAKE_BIN } })) },
  // workloads
  { name: 'workload typo', key: 'models[0].workloads', edit: (d) => void (d.models[0].workloads = ['chta', 'completion']) },
  { name: 'empty workload list', key: 'models[0].workloads', edit: (d) => void (d.models[0].workloads = []) },
  // durations
  { name: 'zero rejoin_interval', key: 'mesh.rejoin_interval', edit: (d) => void (d.mesh.rejoin_interval = '0s') },
  { name: 'zero capacity_poll', key: 'mesh.capacity_poll', edit: (d) => void (d.mesh.capacity_poll = '0ms') },
  { name: 'negative stale_after', key: 'routing.stale_after', edit: (d) => void (d.routing = { stale_after: '-1s' }) },
  { name: 'zero queue_timeout', key: 'routing.queue_timeout', edit: (d) => void (d.routing = { queue_timeout: '0s' }) },
  { name: 'zero startup_timeout', key: 'models[0].startup_timeout', edit: withModels(llama({ startup_timeout: '0m' })) },
  { name: 'zero stream_stall', key: 'api.stream_stall', edit: (d) => void (d.api.stream_stall = '0s') },
  { name: 'zero header_timeout', key: 'api.header_timeout', edit: (d) => void (d.api.header_timeout = '0s') },
  { name: 'sub-millisecond body_idle_timeout', key: 'api.body_idle_timeout', edit: (d) => void (d.api.body_idle_timeout = '0.1ms') },
  { name: 'zero write_stall', key: 'api.write_stall', edit: (d) => void (d.api.write_stall = '0h') },
  { name: 'duration past Node’s timer limit', key: 'routing.queue_timeout', edit: (d) => void (d.routing = { queue_timeout: '1000h' }) },
  { name: 'duration without a unit', key: 'routing.queue_timeout', edit: (d) => void (d.routing = { queue_timeout: 20 }) },
  // sizes and numbers
  { name: 'zero max_body', key: 'api.max_body', edit: (d) => void (d.api.max_body = 0) },
  { name: 'malformed max_body', key: 'api.max_body', edit: (d) => void (d.api.max_body = '12XB') },
  { name: 'max_body past 1GiB', key: 'api.max_body', edit: (d) => void (d.api.max_body = '2GiB') },
  { name: 'zero max_model_name', key: 'api.max_model_name', edit: (d) => void (d.api.max_model_name = 0) },
  { name: 'max_json_depth too small', key: 'api.max_json_depth', edit: (d) => void (d.api.max_json_depth = 0) },
  { name: 'zero parallel', key: 'models[0].parallel', edit: (d) => void (d.models[0].parallel = 0) },
  { name: 'port out of range', key: 'api.port', edit: (d) => void (d.api.port = 70000) },
  { name: 'negative sim ttft', key: 'models[0].sim.ttft_ms', edit: (d) => void (d.models[0].sim = { ttft_ms: -5 }) },
  { name: 'label longer than 255 bytes', key: 'mesh.label', edit: (d) => void (d.mesh.label = 'é'.repeat(200)) },
  // names
  { name: 'node name starting with a dash', key: 'node.name', edit: (d) => void (d.node.name = '-bad') },
  { name: 'node name of 64 characters', key: 'node.name', edit: (d) => void (d.node.name = 'n'.repeat(64)) },
  { name: 'node name with a space', key: 'node.name', edit: (d) => void (d.node.name = 'gpu 1') },
  // files and binaries
  { name: 'llamacpp model path that does not exist', key: 'models[0].path', edit: withModels(llama({ path: path.join(dir, 'missing.gguf') })) },
  { name: 'model path that is a directory', key: 'models[0].path', edit: withModels(llama({ path: dir })) },
  { name: 'model file that is not a GGUF', key: 'models[0].path', edit: withModels(llama({ path: NOT_GGUF })) },
  { name: 'embedded model path that does not exist', key: 'models[0].path', edit: withModels({ name: 'tiny', engine: 'embedded', path: path.join(dir, 'missing.gguf') }) },
  { name: 'engine binary not on PATH', key: 'models[0].llamacpp.binary', edit: withModels(llama({ llamacpp: { binary: 'llama-server-that-is-not-installed' } })) },
  { name: 'engine binary path that does not exist', key: 'models[0].llamacpp.binary', edit: withModels(llama({ llamacpp: { binary: path.join(dir, 'bin/llama-server') } })) },
  { name: 'engine binary that is not executable', key: 'models[0].llamacpp.binary', edit: withModels(llama({ llamacpp: { binary: NOT_EXEC } })) },
  { name: 'llamacpp args that override the node’s --port', key: 'models[0].llamacpp.args[1]', edit: withModels(llama({ llamacpp: { binary: FAKE_BIN, args: ['--flash-attn', '--port=9000'] } })) },
  { name: 'llamacpp args carrying --api-key', key: 'models[0].llamacpp.args[0]', edit: withModels(llama({ llamacpp: { binary: FAKE_BIN, args: ['--api-key', 'k'] } })) },
  { name: 'state_dir that is a file', key: 'node.state_dir', edit: (d) => void (d.node.state_dir = A_FILE) },
  { name: 'tailnet without tailscaled’s socket', key: 'mesh.tailnet_socket', edit: (d) => Object.assign(d.mesh, { network: 'tailnet', advertise: '', tailnet_socket: path.join(dir, 'no.sock') }) },
  // mesh mode and secrets
  { name: 'neither a secret nor mesh.open', key: 'mesh.open', edit: (d) => void (d.mesh.open = false) },
  { name: 'both a secret and mesh.open', key: 'mesh.open', env: { VIIWORK_MESH_SECRET: SECRET } },
  { name: 'secret that is not base64', key: 'VIIWORK_MESH_SECRET', edit: (d) => void (d.mesh.open = false), env: { VIIWORK_MESH_SECRET: 'not base64!' } },
  { name: 'secret of 16 bytes', key: 'VIIWORK_MESH_SECRET', edit: (d) => void (d.mesh.open = false), env: { VIIWORK_MESH_SECRET: crypto.randomBytes(16).toString('base64') } },
  { name: 'previous secret without a current one', key: 'VIIWORK_MESH_SECRET_PREV', edit: (d) => void (d.mesh.open = false), env: { VIIWORK_MESH_SECRET_PREV: SECRET } },
  // engine and client keys
  { name: 'api_key_env naming an unset variable', key: 'models[0].api_key_env', edit: (d) => void (d.models[0].api_key_env = 'CHECK_TEST_UNSET_KEY') },
  { name: 'api_key_env naming an empty variable', key: 'models[0].api_key_env', edit: (d) => void (d.models[0].api_key_env = 'CHECK_TEST_EMPTY_KEY'), env: { CHECK_TEST_EMPTY_KEY: '' } },
  { name: 'api_key_env that is not a variable name', key: 'models[0].api_key_env', edit: (d) => void (d.models[0].api_key_env = '1-KEY') },
  { name: 'keys_env naming an unset variable', key: 'api.keys_env', edit: (d) => void (d.api.keys_env = 'CHECK_TEST_UNSET_KEYS') },
  { name: 'keys_file that does not exist', key: 'api.keys_file', edit: (d) => void (d.api.keys_file = path.join(dir, 'no-keys')) },
  { name: 'keys_file with no keys in it', key: 'api.keys_file', edit: (d) => void (d.api.keys_file = EMPTY_KEYS) },
  { name: 'protect_ops without client keys', key: 'api.protect_ops', edit: (d) => void (d.api.protect_ops = true) },
  // conflicting entries
  { name: 'one openai server listed twice under one name', key: 'models[1].url', edit: withModels({ name: 'e', engine: 'openai', url: 'http://127.0.0.1:9100' }, { name: 'e', engine: 'openai', url: 'http://127.0.0.1:9100/' }) },
  { name: 'alias named like a local model', key: 'aliases.sim-chat', edit: (d) => void (d.aliases = { 'sim-chat': 'other' }) },
  { name: 'alias pointing at itself', key: 'aliases.loop', edit: (d) => void (d.aliases = { loop: { target: 'loop' } }) },
  { name: 'api and gossip on one port', key: 'mesh.port', edit: (d) => void ((d.api.port = 7946), (d.mesh.port = 7946)) },
  { name: 'openai url that is the node’s own API', key: 'models[0].url', edit: (d) => void ((d.api.port = 8086), (d.models = [{ name: 'loop', engine: 'openai', url: 'http://127.0.0.1:8086' }])) },
  // addresses
  { name: 'openai url that is not http', key: 'models[0].url', edit: withModels({ name: 'f', engine: 'openai', url: 'ftp://127.0.0.1/' }) },
  { name: 'seed without a port', key: 'mesh.seeds[0]', edit: (d) => void (d.mesh.seeds = ['10.0.0.1']) },
  { name: 'seed with port 0', key: 'mesh.seeds[0]', edit: (d) => void (d.mesh.seeds = ['10.0.0.1:0']) },
  { name: 'advertise that is not an IP', key: 'mesh.advertise', edit: (d) => void (d.mesh.advertise = 'gpu1.lan') },
  { name: 'unknown network', key: 'mesh.network', edit: (d) => void (d.mesh.network = 'wan') },
  { name: 'api.host with a scheme', key: 'api.host', edit: (d) => void (d.api.host = 'http://0.0.0.0') },
  { name: 'allowed_hosts entry with a port', key: 'api.allowed_hosts[0]', edit: (d) => void (d.api.allowed_hosts = ['gpu1.lan:8086']) },
  { name: 'CORS origin with a trailing slash', key: 'api.cors.allow_origins[0]', edit: (d) => void (d.api.cors = { allow_origins: ['https://app.example.com/'] }) },
  // the file itself
  { name: 'YAML that does not parse', key: 'FILE', yaml: 'api: {port: 8086\nmesh: [' },
  { name: 'a key given twice', key: 'FILE', yaml: 'api: {port: 1}\napi: {port: 2}\n' },
];

let caseNo = 0;
function writeCase(c: Pick<Case, 'edit' | 'yaml'>): string {
  const file = path.join(dir, `case-${++caseNo}.yaml`);
  if (c.yaml !== undefined) fs.writeFileSync(file, c.yaml);
  else {
    const d = baseDoc();
    c.edit?.(d);
    fs.writeFileSync(file, stringify(d));
  }
  return file;
}

/** The key a case expects, with FILE standing for the file's own path. */
const expectedKey = (c: Case, file: string) => (c.key === 'FILE' ? file : c.key);
const names = (key: string, expected: string) => key === expected || key.startsWith(`${expected}[`) || key.startsWith(`${expected}.`);

before(() => {
  fs.writeFileSync(GGUF, Buffer.concat([Buffer.from('GGUF'), Buffer.alloc(28)]));
  fs.writeFileSync(NOT_GGUF, 'PK\u0003\u0004 a zip, not a model');
  fs.writeFileSync(FAKE_BIN, '#!/bin/sh\nexit 0\n', { mode: 0o755 });
  fs.writeFileSync(NOT_EXEC, '#!/bin/sh\nexit 0\n', { mode: 0o644 });
  fs.writeFileSync(KEYS, '# client keys\nk-0123456789abcdef0123\n\nk-fedcba9876543210fedc\n', { mode: 0o600 });
  fs.writeFileSync(EMPTY_KEYS, '# nobody yet\n\n', { mode: 0o600 });
  fs.writeFileSync(A_FILE, 'not a directory');
});

after(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('viiwork check: the table of broken configs', () => {
  it(`has at least 43 cases (${CASES.length})`, () => {
    assert.ok(CASES.length >= 43);
  });

  it('passes the base config every case breaks, with no warning', async () => {
    const r = await checkConfigFile(writeCase({}), { env: envWith(), ports: false });
    assert.deepEqual(r.findings, []);
  });

  it('passes a config that uses every engine, engine keys, client keys and every new api key', async () => {
    const file = writeCase({
      edit: (d) => {
        d.api = {
          ...d.api,
          allowed_hosts: ['gpu1.lan', '10.0.0.5'],
          keys_env: 'CHECK_TEST_KEYS',
          keys_file: KEYS,
          protect_ops: true,
          stream_stall: '30s',
          max_model_name: 512,
          header_timeout: '10s',
          body_idle_timeout: '10s',
          write_stall: '2m',
          max_json_depth: 128,
          cors: { allow_origins: ['https://app.example.com', '*'] },
        };
        d.models = [
          llama({ api_key_env: 'CHECK_TEST_ENGINE_KEY', workloads: ['chat', 'completion', 'responses'], llamacpp: { binary: FAKE_BIN, args: ['--flash-attn'] } }),
          { name: 'remote', engine: 'openai', url: 'http://127.0.0.1:9100/v1', api_key_env: 'CHECK_TEST_ENGINE_KEY', workloads: ['embeddings'] },
          { name: 'tiny', engine: 'embedded', path: GGUF, embedded: { threads: 1 } },
          { name: 'demo', engine: 'sim', api_key_env: 'CHECK_TEST_ENGINE_KEY' },
        ];
        d.aliases = { chat: { target: 'llama', fallbacks: ['demo'] } };
      },
    });
    const r = await checkConfigFile(file, { env: envWith({ CHECK_TEST_KEYS: 'k-aaaaaaaaaaaaaaaaaaaa, k-bbbbbbbbbbbbbbbbbbbb', CHECK_TEST_ENGINE_KEY: 'sk-engine' }), ports: false });
    assert.deepEqual(r.findings.filter((f) => f.level === 'error'), []);
  });

  for (const c of CASES) {
    it(`check and serve's preflight both refuse: ${c.name} (${c.key})`, async () => {
      const file = writeCase(c);
      const key = expectedKey(c, file);
      const env = envWith(c.env);
      const r = await checkConfigFile(file, { env, ports: false });
      const errors = r.findings.filter((f) => f.level === 'error');
      assert.ok(
        errors.some((f) => names(f.key, key)),
        `no error names ${key}; got:\n${r.findings.map((f) => `${f.level} ${f.key}: ${f.message}`).join('\n') || '(none)'}`,
      );
      for (const f of errors) assert.ok(f.fix.length > 0 && f.message.length > 0, `${f.key} has a message and a fix`);
      // serve (and SIGHUP) load through loadCheckedConfig: the same file must throw, naming the same key.
      assert.throws(
        () => loadCheckedConfig(file, { env }),
        (err: unknown) => err instanceof ConfigError && err.findings.some((f) => names(f.key, key)),
      );
    });
  }
});

describe('viiwork check: findings beyond the schema', () => {
  it('suggests the key or workload meant', async () => {
    const r = await checkConfigFile(writeCase({ edit: (d) => ((d.api.alowed_hosts = []), (d.models[0].workloads = ['chta'])) }), { env: envWith(), ports: false });
    assert.match(r.findings.find((f) => f.key === 'api.alowed_hosts')!.fix, /did you mean "allowed_hosts"/);
    assert.match(r.findings.find((f) => f.key === 'models[0].workloads[0]')!.fix, /did you mean "chat"/);
  });

  it('warns, without an error, when the API port is already in use', async () => {
    const server = net.createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const port = (server.address() as net.AddressInfo).port;
      const file = writeCase({ edit: (d) => void (d.api.port = port) });
      const r = await checkConfigFile(file, { env: envWith() });
      assert.deepEqual(
        r.findings.map((f) => [f.level, f.key]),
        [['warning', 'api.host, api.port']],
      );
      assert.match(r.findings[0].message, /in use/);
    } finally {
      server.close();
    }
  });

  it('is an error when the advertise address is not this machine’s', async () => {
    const config = parseConfigText(stringify({ ...baseDoc(), mesh: { ...baseDoc().mesh, advertise: '192.0.2.1', port: 7946 } }));
    const findings = await probePorts(config);
    assert.ok(findings.some((f) => f.level === 'error' && f.key === 'mesh.advertise, mesh.port' && /not an address of this machine/.test(f.message)), JSON.stringify(findings));
  });

  it('warns on a world-readable keys file and on short keys', async () => {
    const loose = path.join(dir, 'loose-keys');
    fs.writeFileSync(loose, 'short\n', { mode: 0o644 });
    fs.chmodSync(loose, 0o644);
    const r = await checkConfigFile(writeCase({ edit: (d) => void (d.api.keys_file = loose) }), { env: envWith(), ports: false });
    assert.deepEqual(r.findings.map((f) => [f.level, f.key]), [['warning', 'api.keys_file'], ['warning', 'api.keys_file']]);
  });
});

describe('the commands', () => {
  it('the shipped examples pass `viiwork check`', async () => {
    const examples = fs.readdirSync('examples').filter((f) => f.endsWith('.yaml'));
    assert.ok(examples.length > 0);
    for (const f of examples) {
      const { stdout } = await run(process.execPath, [BIN, 'check', '--no-ports', '--config', path.join('examples', f)], { env: envWith(), timeout: 30_000 });
      assert.match(stdout, /: ok \(/);
    }
  });

  it('`viiwork check` exits 1 and names every key and its fix', async () => {
    const file = writeCase({ edit: (d) => ((d.mesh.rejoin_interval = '0s'), (d.models = [llama({ path: path.join(dir, 'missing.gguf'), workloads: ['chta'] })])) });
    await assert.rejects(run(process.execPath, [BIN, 'check', '--config', file], { env: envWith(), timeout: 30_000 }), (err: { code: number; stderr: string }) => {
      assert.equal(err.code, 1);
      assert.match(err.stderr, /error +mesh\.rejoin_interval: expected a duration greater than zero/);
      assert.match(err.stderr, /error +models\[0\]\.workloads\[0\]: unknown workload "chta"/);
      assert.match(err.stderr, /fix: /);
      return true;
    });
    // The schema failed first, so the path is reported once the schema passes.
    const second = writeCase({ edit: (d) => void (d.models = [llama({ path: path.join(dir, 'missing.gguf') })]) });
    const { stdout } = await run(process.execPath, [BIN, 'check', '--json', '--config', second], { env: envWith(), timeout: 30_000 }).catch((e) => e);
    const doc = JSON.parse(stdout) as { ok: boolean; findings: { key: string; level: string }[] };
    assert.equal(doc.ok, false);
    assert.deepEqual(doc.findings.map((f) => f.key), ['models[0].path']);
  });

  // One process per case costs about a second here: a representative subset, run two at a time.
  const SERVE_SUBSET = ['workload typo', 'zero rejoin_interval', 'llamacpp model path that does not exist', 'engine binary not on PATH', 'secret of 16 bytes', 'api_key_env naming an unset variable'];
  it(`\`viiwork serve\` refuses the same files at once, before binding anything (${SERVE_SUBSET.length} of them)`, async () => {
    const cases = SERVE_SUBSET.map((n) => CASES.find((c) => c.name === n)!);
    const refuse = async (c: Case) => {
      const file = writeCase({ edit: (d) => ((d.api.port = 0), c.edit?.(d)) });
      const started = Date.now();
      const err = await run(process.execPath, [BIN, 'serve', '--config', file], { env: envWith(c.env), timeout: 20_000 }).then(
        () => assert.fail(`${c.name}: serve exited 0`),
        (e: { code: number | null; signal: string | null; stderr: string; stdout: string }) => e,
      );
      assert.equal(err.signal, null, `${c.name}: serve had to be killed (it started instead of refusing)`);
      assert.notEqual(err.code, 0);
      assert.match(err.stderr, new RegExp(`^  ${c.key.replace(/[.[\]]/g, '\\$&')}`, 'm'), `${c.name}: stderr names ${c.key}:\n${err.stderr}`);
      assert.doesNotMatch(err.stdout + err.stderr, /listening|joined|healthy/, `${c.name}: nothing started`);
      return Date.now() - started;
    };
    for (let i = 0; i < cases.length; i += 2) await Promise.all(cases.slice(i, i + 2).map(refuse));
  });
});
