/**
 * Everything `serve` checks before it accepts traffic, as one list of
 * findings ({level, key, message, fix}): `viiwork check` prints them, `serve`
 * and SIGHUP refuse a file with any error. The schema (load.ts) decides what
 * a value may look like; this file decides whether the machine can run it:
 * files and binaries that exist, the mesh mode, client and engine keys, the
 * state directory, entries that contradict each other. Port probing is the
 * one asynchronous check (`probePorts`), run by `check` only: a port in use
 * is a warning, since the node being checked may be the one holding it.
 */
import fs from 'node:fs';
import net from 'node:net';
import dgram from 'node:dgram';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { loadMeshMode, MeshModeError, SECRET_ENV, SECRET_PREV_ENV } from '../security/secret.ts';
import { findsNoMembers, NODE_NAME, type Config, type ModelConfig } from '../config/schema.ts';
import { ConfigError, formatFinding, loadConfig, type Finding } from '../config/load.ts';
import { readClientKeys } from '../config/keys.ts';
import { findExecutable, rpcServerBinary } from '../config/executable.ts';

export type { Finding } from '../config/load.ts';

export interface PreflightOptions {
  /** The environment `serve` would run with (secrets, keys, PATH). */
  env: NodeJS.ProcessEnv;
  /** Relative model paths and binaries are resolved from here, as the engines see them. */
  cwd?: string;
}

/** Flags the node gives llama-server itself; the same flag in `args` would win and cut the node off its engine. */
const RESERVED_LLAMA_FLAGS: Record<string, { from: string; key?: string }> = {
  '-m': { from: 'path', key: 'path' },
  '--model': { from: 'path', key: 'path' },
  '--host': { from: 'loopback, always' },
  '--port': { from: 'a free loopback port it picks' },
  '-np': { from: 'parallel', key: 'parallel' },
  '--parallel': { from: 'parallel', key: 'parallel' },
  '-c': { from: 'context × parallel', key: 'context' },
  '--ctx-size': { from: 'context × parallel', key: 'context' },
  '--api-key': { from: 'api_key_env', key: 'api_key_env' },
  '--api-key-file': { from: 'api_key_env', key: 'api_key_env' },
};

const GGUF_MAGIC = Buffer.from('GGUF');

/** Every check `serve` runs before it starts, on an already valid config. Never throws. */
export function preflight(config: Config, opts: PreflightOptions): Finding[] {
  const out: Finding[] = [];
  const cwd = opts.cwd ?? process.cwd();
  const error = (key: string, message: string, fix: string) => out.push({ level: 'error', key, message, fix });
  const warn = (key: string, message: string, fix: string) => out.push({ level: 'warning', key, message, fix });

  // node.name: its default (the host name) is not checked by the schema.
  if (!NODE_NAME.test(config.node.name)) {
    error('node.name', `"${config.node.name}" (the host name when node.name is not set) is not a valid node name`, 'set node.name to a name matching [A-Za-z0-9][A-Za-z0-9._-]{0,62}');
  }

  checkStateDir(config.node.state_dir, error);

  // The mesh mode: a secret XOR mesh.open (SPEC section 6).
  try {
    loadMeshMode(opts.env, config.mesh.open);
  } catch (err) {
    if (!(err instanceof MeshModeError)) throw err;
    const key = err.message.startsWith(SECRET_PREV_ENV) ? SECRET_PREV_ENV : err.message.startsWith(SECRET_ENV) ? SECRET_ENV : 'mesh.open';
    const fix =
      key === 'mesh.open'
        ? /both modes/.test(err.message)
          ? `either unset ${SECRET_ENV} (open mesh) or remove mesh.open (secured mesh)`
          : `export ${SECRET_ENV}=$(viiwork secret) on every node, or set mesh.open: true on a trusted network`
        : `set ${key} to the output of \`viiwork secret\` (the same value on every node)`;
    error(key, err.message, fix);
  }

  // Where gossip binds.
  if (config.mesh.network === 'tailnet' && config.mesh.advertise === '' && !fs.existsSync(config.mesh.tailnet_socket)) {
    error('mesh.tailnet_socket', `mesh.network is tailnet but tailscaled's socket ${config.mesh.tailnet_socket} does not exist`, 'start tailscaled, correct mesh.tailnet_socket, or set mesh.advertise (or mesh.network: lan)');
  }
  if (config.api.port !== 0 && config.api.port === config.mesh.port && hostsOverlap(config.api.host, config.mesh.advertise)) {
    error('mesh.port', `api.port and mesh.port are both ${config.api.port} on overlapping addresses: gossip's TCP listener cannot bind`, 'give them different ports (defaults: api.port 8086, mesh.port 7946)');
  }
  const seen = new Set<string>();
  config.mesh.seeds.forEach((s, i) => {
    if (seen.has(s)) warn(`mesh.seeds[${i}]`, `"${s}" is listed twice`, 'remove the duplicate');
    seen.add(s);
    if (config.mesh.advertise && s === `${config.mesh.advertise}:${config.mesh.port}`) warn(`mesh.seeds[${i}]`, `"${s}" is this node's own gossip address`, 'list other members as seeds');
  });

  splitFindings(config, opts.env, cwd, warn);

  // Client keys.
  const keys = readClientKeys(config.api, opts.env);
  for (const p of keys.problems) error(p.key, p.message, p.fix);
  if (keys.problems.length === 0) {
    if ((config.api.keys_env || config.api.keys_file) && keys.keys.length === 0 && keys.table.length === 0) {
      error(config.api.keys_file ? 'api.keys_file' : 'api.keys_env', 'holds no keys: every request would be refused', 'add at least one key (one per line in the file, comma-separated in the variable)');
    }
    if (keys.keys.some((k) => k.length < 16)) warn(config.api.keys_file ? 'api.keys_file' : 'api.keys_env', 'a client key is shorter than 16 characters', 'use long random keys, such as the output of `viiwork secret`');
  }
  if (config.api.protect_ops && !config.api.keys_env && !config.api.keys_file) {
    error('api.protect_ops', 'is true but no client keys are configured, so /health, /metrics and the dashboards could never be reached', 'set api.keys_env or api.keys_file, or set api.protect_ops: false');
  }
  if (config.api.keys_file) {
    try {
      if ((fs.statSync(config.api.keys_file).mode & 0o004) !== 0) warn('api.keys_file', `${config.api.keys_file} is readable by every user of this machine`, `chmod 600 ${config.api.keys_file}`);
    } catch {
      // reported by readClientKeys
    }
  }

  config.models.forEach((m, i) => checkModel(m, `models[${i}]`, config, { cwd, env: opts.env }, error, warn));
  checkDuplicates(config, error, warn);
  checkAliases(config, error, warn);
  return out;
}

type Report = (key: string, message: string, fix: string) => void;

function checkStateDir(dir: string, error: Report): void {
  let probe = path.resolve(dir);
  try {
    const st = fs.statSync(probe);
    if (!st.isDirectory()) return error('node.state_dir', `${dir} exists and is not a directory`, 'point node.state_dir at a directory (it is created when missing)');
  } catch {
    // Missing: the nearest existing ancestor must let us create it.
    while (!fs.existsSync(probe) && path.dirname(probe) !== probe) probe = path.dirname(probe);
  }
  try {
    fs.accessSync(probe, fs.constants.W_OK | fs.constants.X_OK);
  } catch {
    error('node.state_dir', `${probe} is not writable: ${dir} cannot be created or written`, 'point node.state_dir at a directory this user may write, or fix its permissions');
  }
}

function checkModel(m: ModelConfig, at: string, config: Config, ctx: { cwd: string; env: NodeJS.ProcessEnv }, error: Report, warn: Report): void {
  if (m.api_key_env !== undefined) {
    const v = ctx.env[m.api_key_env];
    if (v === undefined) error(`${at}.api_key_env`, `${m.api_key_env} is not set`, `export ${m.api_key_env} with the engine's key before starting viiwork, or remove ${at}.api_key_env`);
    else if (v.trim() === '') error(`${at}.api_key_env`, `${m.api_key_env} is set but empty`, `put the engine's key in ${m.api_key_env}`);
  }

  const workloads = m.workloads ?? [];
  const dup = workloads.find((w, j) => workloads.indexOf(w) !== j);
  if (dup) warn(`${at}.workloads`, `"${dup}" is listed twice`, 'list each workload once');
  if (workloads.includes('responses') && !workloads.includes('chat')) {
    warn(`${at}.workloads`, '"responses" without "chat": /v1/responses is routed to targets that list chat, so this entry never gets it', 'add chat to the workloads');
  }
  if (workloads.includes('messages') && !workloads.includes('chat')) {
    warn(`${at}.workloads`, '"messages" without "chat": /v1/messages is routed to targets that list chat, so this entry never gets it', 'add chat to the workloads');
  }
  if (m.audio_input && m.workloads && !workloads.includes('chat')) {
    warn(`${at}.audio_input`, 'audio_input is true but the entry does not list chat: audio only reaches chat targets', 'add chat to the workloads, or remove audio_input');
  }

  if (m.engine === 'llamacpp' || m.engine === 'embedded') {
    // SPEC section 11: a file that is not here may come from a member (a fetched copy lives in node.models_dir).
    const fetched = path.join(config.node.models_dir, path.basename(m.path));
    const here = fs.existsSync(path.resolve(ctx.cwd, m.path));
    if (!here && fs.existsSync(fetched)) checkGguf(fetched, `${at}.path`, ctx.cwd, error);
    else if (!here && m.fetch === 'mesh' && m.load === 'always' && findsNoMembers(config)) {
      // No seeds, no mDNS, no tailnet: no member will ever offer the file, so a missing one is a mistake here.
      error(`${at}.path`, `${m.path} does not exist, and this node finds no members (no mesh.seeds, mdns off) to fetch it from`, 'correct the path or download the model there; or give mesh.seeds so it is fetched from a member that has it');
    } else if (!here && m.fetch === 'mesh') {
      const when = m.load === 'on_demand' ? 'before it loads' : 'once a member publishes it, and loads then (load: always)';
      warn(`${at}.path`, `${m.path} is not on this machine: it is fetched from a member that has it ${when}`, 'nothing to do if a member has the file; otherwise download it once to any member');
      if (m.memory === 'auto') warn(`${at}.memory`, 'memory: auto cannot be read from a file that is not here; the entry counts 0 bytes until it is fetched', `set ${at}.memory to a size such as "8GiB"`);
    } else if (!here && m.fetch === 'never') {
      error(`${at}.path`, `${m.path} does not exist and ${at}.fetch is never: it is not fetched from members`, 'copy the file there, or set fetch: mesh to fetch it from a member that has it');
    } else checkGguf(m.path, `${at}.path`, ctx.cwd, error);
  }

  if (m.engine === 'llamacpp') {
    const found = findExecutable(m.llamacpp.binary, ctx.env.PATH ?? '', ctx.cwd);
    if (!found.ok) error(`${at}.llamacpp.binary`, found.message, `install llama.cpp's llama-server, or set ${at}.llamacpp.binary to its full path`);
    m.llamacpp.args.forEach((a, j) => {
      const flag = a.split('=')[0];
      const owner = RESERVED_LLAMA_FLAGS[flag];
      if (!owner) return;
      const fix = owner.key === 'api_key_env' ? `remove it and name the key's variable in ${at}.api_key_env` : owner.key ? `remove it and set ${at}.${owner.key} instead` : 'remove it';
      error(`${at}.llamacpp.args[${j}]`, `${flag} is set by the node itself (from ${owner.from}); a second one would override it and cut the node off its engine`, fix);
    });
  }

  if (m.engine === 'embedded') {
    try {
      createRequire(path.join(ctx.cwd, 'noop.js')).resolve('node-llama-cpp');
    } catch {
      try {
        createRequire(import.meta.url).resolve('node-llama-cpp');
      } catch {
        error(`${at}.engine`, 'engine embedded needs the optional package node-llama-cpp, which is not installed', 'reinstall with `npm ci` (optional dependencies included), or use engine: llamacpp');
      }
    }
    const cpus = typeof os.availableParallelism === 'function' ? os.availableParallelism() : os.cpus().length;
    if (m.embedded.threads > cpus) warn(`${at}.embedded.threads`, `${m.embedded.threads} threads on a machine with ${cpus} CPUs oversubscribes it`, `set ${at}.embedded.threads to at most ${cpus}`);
  }

  if (m.engine === 'openai') {
    const u = new URL(m.url);
    const port = Number(u.port || (u.protocol === 'https:' ? 443 : 80));
    if (config.api.port !== 0 && port === config.api.port && isLocalHost(u.hostname) && hostsOverlap(config.api.host, u.hostname)) {
      error(`${at}.url`, `${m.url} is this node's own API: requests would loop`, 'point url at the engine server, not at viiwork');
    }
  }
}

/**
 * A model bigger than one host (SPEC section 11): lending and split entries need llama.cpp's `ggml-rpc-server`, and in
 * an open mesh their RPC traffic crosses the network without encryption (members known by address only).
 */
function splitFindings(config: Config, env: NodeJS.ProcessEnv, cwd: string, warn: Report): void {
  const firstLlama = config.models.find((m) => m.engine === 'llamacpp');
  const needs: { key: string; llamaServer: string | undefined; what: string }[] = [];
  if (config.node.lend_memory) needs.push({ key: 'node.lend_memory', llamaServer: firstLlama?.engine === 'llamacpp' ? firstLlama.llamacpp.binary : 'llama-server', what: 'every lend would fail' });
  config.models.forEach((m, i) => {
    if (m.engine === 'llamacpp' && m.split !== false) needs.push({ key: `models[${i}].split`, llamaServer: m.llamacpp.binary, what: `${m.name} can run only whole on this node` });
  });
  for (const n of needs) {
    const binary = rpcServerBinary(config.node.rpc_server, n.llamaServer, env.PATH ?? '', cwd);
    const found = findExecutable(binary, env.PATH ?? '', cwd);
    if (!found.ok)
      warn(n.key, `ggml-rpc-server is not found (${found.message}): ${n.what}`, "build llama.cpp with -DGGML_RPC=ON (`npm run engine` does) and put ggml-rpc-server beside llama-server, or set node.rpc_server to its path");
  }
  if (config.mesh.open && needs.length)
    warn(
      needs[0].key,
      'in an open mesh the tunnel to lent memory carries llama.cpp\'s RPC traffic unencrypted, and a member is known by its address alone',
      `set a mesh secret on every node (export ${SECRET_ENV}=$(viiwork secret), remove mesh.open): the tunnel is then TLS with a key from it`,
    );
}

/** A model file: present, a regular readable file, and a GGUF. */
function checkGguf(p: string, key: string, cwd: string, error: Report): void {
  const full = path.resolve(cwd, p);
  const shown = full === p ? p : `${p} (${full})`;
  let st: fs.Stats;
  try {
    st = fs.statSync(full);
  } catch {
    return error(key, `${shown} does not exist`, 'correct the path (relative paths are taken from the directory viiwork runs in), or download the model there');
  }
  if (!st.isFile()) return error(key, `${shown} is not a file`, 'point it at the .gguf file itself (for a split model, its first part)');
  try {
    const fd = fs.openSync(full, 'r');
    const head = Buffer.alloc(4);
    try {
      fs.readSync(fd, head, 0, 4, 0);
    } finally {
      fs.closeSync(fd);
    }
    if (!head.equals(GGUF_MAGIC)) error(key, `${shown} is not a GGUF file`, 'point it at a .gguf model (convert other formats with llama.cpp\'s convert scripts)');
  } catch (err) {
    error(key, `${shown} cannot be read: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, 'make the file readable by the user viiwork runs as');
  }
}

function isLocalHost(h: string): boolean {
  return h === 'localhost' || h === '127.0.0.1' || h === '[::1]' || h === '::1' || h === '0.0.0.0' || h.startsWith('127.');
}

/** Could two bind addresses collide? A wildcard or an empty (not yet known) address overlaps everything. */
function hostsOverlap(a: string, b: string): boolean {
  const wild = (h: string) => h === '' || h === '0.0.0.0' || h === '::' || h === '[::]';
  const norm = (h: string) => (h === 'localhost' || h === '[::1]' ? (h === 'localhost' ? '127.0.0.1' : '::1') : h);
  return wild(a) || wild(b) || norm(a) === norm(b);
}

function checkDuplicates(config: Config, error: Report, warn: Report): void {
  const byUrl = new Map<string, number>();
  const byTarget = new Map<string, number>();
  config.models.forEach((m, i) => {
    if (m.engine === 'openai') {
      const k = `${m.name}\u0000${new URL(m.url).href.replace(/\/+$/, '')}`;
      const first = byUrl.get(k);
      if (first !== undefined) {
        error(`models[${i}].url`, `models[${first}] and models[${i}] are both "${m.name}" at ${m.url}: one server would be counted twice, and get twice the requests it has slots for`, `remove models[${i}] and set parallel on models[${first}] to the server's real number of slots`);
      } else byUrl.set(k, i);
    }
    if (m.workloads) {
      const k = `${m.name}\u0000${[...new Set(m.workloads)].sort().join(',')}\u0000${m.audio_input}`;
      const first = byTarget.get(k);
      if (first === undefined) byTarget.set(k, i);
      else if (config.models[first].context !== m.context) {
        warn(`models[${i}].context`, `models[${first}] and models[${i}] merge into one target of "${m.name}" but have different contexts (${config.models[first].context} and ${m.context}); a long prompt may land on the smaller one`, 'give entries of one target the same context, or different workloads');
      }
    }
  });
}

function checkAliases(config: Config, error: Report, warn: Report): void {
  const local = new Set(config.models.map((m) => m.name));
  for (const [name, entry] of Object.entries(config.aliases)) {
    const target = typeof entry === 'string' ? entry : entry.target;
    const fallbacks = typeof entry === 'string' ? [] : entry.fallbacks;
    if (local.has(name)) error(`aliases.${name}`, `"${name}" is both an alias and a model of this node: one would hide the other`, 'rename the alias or the model');
    if (target === name || fallbacks.includes(name)) error(`aliases.${name}`, `the alias "${name}" points at itself`, 'point it at a model name');
    if (fallbacks.includes(target)) warn(`aliases.${name}.fallbacks`, `"${target}" is both the target and a fallback`, 'remove it from fallbacks');
    if (new Set(fallbacks).size !== fallbacks.length) warn(`aliases.${name}.fallbacks`, 'a fallback is listed twice', 'list each fallback once');
  }
}

/**
 * Can the ports be bound? An address in use is a warning (the node being
 * checked may hold it); an address that is not this machine's, or a port
 * this user may not bind, is an error.
 */
export async function probePorts(config: Config): Promise<Finding[]> {
  const out: Finding[] = [];
  const probe = async (key: string, what: string, host: string, port: number, proto: 'tcp' | 'udp') => {
    if (port === 0) return;
    const err = await (proto === 'tcp' ? bindTcp(host, port) : bindUdp(host, port));
    if (!err) return;
    const where = `${host.includes(':') ? `[${host}]` : host}:${port}/${proto}`;
    if (err.code === 'EADDRINUSE') {
      out.push({ level: 'warning', key, message: `${what} ${where} is in use (by this node, if it is running: then a SIGHUP applies the file; otherwise serve would fail)`, fix: `stop what holds it, or choose another ${key.split(',')[0].trim()}` });
    } else if (err.code === 'EADDRNOTAVAIL') {
      out.push({ level: 'error', key, message: `${host} is not an address of this machine`, fix: `use one of this machine's addresses (${localAddresses().join(', ') || 'none found'})` });
    } else if (err.code === 'EACCES') {
      out.push({ level: 'error', key, message: `this user may not bind ${where}`, fix: 'use a port from 1024 up, or grant CAP_NET_BIND_SERVICE' });
    } else {
      out.push({ level: 'error', key, message: `cannot bind ${where}: ${err.code ?? err.message}`, fix: `correct ${key}` });
    }
  };
  await probe('api.host, api.port', 'the API address', config.api.host, config.api.port, 'tcp');
  if (config.mesh.advertise) {
    await probe('mesh.advertise, mesh.port', 'the gossip address', config.mesh.advertise, config.mesh.port, 'tcp');
    await probe('mesh.advertise, mesh.port', 'the gossip address', config.mesh.advertise, config.mesh.port, 'udp');
  }
  // Only one finding per key pair when both TCP and UDP say the same.
  return out.filter((f, i) => out.findIndex((g) => g.key === f.key && g.level === f.level && g.fix === f.fix) === i);
}

function bindTcp(host: string, port: number): Promise<NodeJS.ErrnoException | undefined> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', (err) => resolve(err as NodeJS.ErrnoException));
    server.listen({ host, port, exclusive: true }, () => server.close(() => resolve(undefined)));
  });
}

function bindUdp(host: string, port: number): Promise<NodeJS.ErrnoException | undefined> {
  return new Promise((resolve) => {
    const socket = dgram.createSocket(net.isIPv6(host) ? 'udp6' : 'udp4');
    socket.once('error', (err) => {
      socket.close();
      resolve(err as NodeJS.ErrnoException);
    });
    socket.bind({ address: host, port, exclusive: true }, () => socket.close(() => resolve(undefined)));
  });
}

function localAddresses(): string[] {
  return Object.values(os.networkInterfaces())
    .flat()
    .filter((a): a is os.NetworkInterfaceInfo => Boolean(a))
    .map((a) => a.address);
}

export interface CheckResult {
  file: string;
  /** The validated config, when the schema accepted it. */
  config?: Config;
  findings: Finding[];
}

/** `viiwork check`: the schema, then every preflight check, then (optionally) the ports. */
export async function checkConfigFile(file: string, opts: PreflightOptions & { ports?: boolean }): Promise<CheckResult> {
  let config: Config;
  try {
    config = loadConfig(file);
  } catch (err) {
    if (err instanceof ConfigError) return { file, findings: err.findings };
    throw err;
  }
  const findings = preflight(config, opts);
  if (opts.ports !== false) findings.push(...(await probePorts(config)));
  return { file, config, findings };
}

/**
 * Load a file as `serve` (and SIGHUP) must: the schema and every preflight
 * check, throwing a ConfigError that lists every error; warnings come back
 * for the log. Ports are left to the node's own bind, which names them.
 */
export function loadCheckedConfig(file: string, opts: PreflightOptions): { config: Config; warnings: Finding[] } {
  const config = loadConfig(file);
  const findings = preflight(config, opts);
  const errors = findings.filter((f) => f.level === 'error');
  if (errors.length) {
    throw new ConfigError(errors.map((f) => `${formatFinding(f)} (fix: ${f.fix})`).join('\n'), errors.map(formatFinding), errors);
  }
  return { config, warnings: findings.filter((f) => f.level === 'warning') };
}
