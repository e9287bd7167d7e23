/**
 * The real agent CLIs, Claude Code (`@anthropic-ai/claude-code`) and Codex
 * (`@openai/codex`), at the versions the issue measured. They are not the
 * project's dependencies (a few hundred MB each, with a native binary): a
 * test installs them from npm into a cache directory the first time and
 * skips with the reason when that fails.
 *
 * They must never reach the internet: every switch that turns off their
 * telemetry, update checks, error reports and auth flows is set, HOME is a
 * fresh temp dir, the only base URL they know is the loopback node, and
 * every proxy variable points at a closed loopback port, so anything else
 * they might try fails on loopback instead of leaving the machine.
 */
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export const CLAUDE_CODE_VERSION = '2.1.328';
export const CODEX_VERSION = '0.169.0';

/** A loopback port nothing listens on: the proxy for everything but the node. */
const DEAD_PROXY = 'http://127.0.0.1:9';

function cacheDir(name: string, version: string): string {
  return path.join(process.env.VIIWORK_AGENT_CACHE ?? os.tmpdir(), `viiwork-agent-cli-${name}-${version}`);
}

/**
 * Install `spec` into `dir`: into a directory of this process first, then
 * renamed into place, so test files installing at the same time (npm test
 * runs two at once) never share a half-written tree; the loser keeps the winner's.
 */
function npmInstall(dir: string, spec: string): string | undefined {
  const mine = `${dir}.partial-${process.pid}`;
  const clear = () => {
    try {
      fs.rmSync(mine, { recursive: true, force: true });
    } catch {
      // nothing of ours to clear
    }
  };
  try {
    clear();
    fs.mkdirSync(mine, { recursive: true });
    execFileSync('npm', ['install', '--no-save', '--no-audit', '--no-fund', '--prefix', mine, spec], { stdio: 'pipe', timeout: 600_000 });
    try {
      fs.renameSync(mine, dir);
    } catch {
      // Another process got there first (or an older, broken copy is in the way: replace it).
      if (!fs.existsSync(path.join(dir, 'node_modules'))) {
        fs.rmSync(dir, { recursive: true, force: true });
        fs.renameSync(mine, dir);
      }
    }
    return undefined;
  } catch (err) {
    return `npm install ${spec} failed: ${String((err as { stderr?: Buffer }).stderr ?? (err as Error).message).slice(0, 300)}`;
  } finally {
    clear();
  }
}

export type Cli = { ok: true; command: string; args: string[] } | { ok: false; skip: string };

/** Claude Code's native binary (the package's postinstall copies it into bin/; without it, the platform package has it). */
export function ensureClaudeCode(): Cli {
  const dir = cacheDir('claude-code', CLAUDE_CODE_VERSION);
  const platform = `${process.platform}-${process.arch}`;
  const candidates = [path.join(dir, 'node_modules/@anthropic-ai/claude-code/bin/claude.exe'), path.join(dir, `node_modules/@anthropic-ai/claude-code-${platform}/claude`)];
  const found = () => candidates.find((c) => fs.existsSync(c) && fs.statSync(c).size > 1_000_000);
  if (!found()) {
    const failed = npmInstall(dir, `@anthropic-ai/claude-code@${CLAUDE_CODE_VERSION}`);
    if (failed) return { ok: false, skip: failed };
  }
  const bin = found();
  return bin ? { ok: true, command: bin, args: [] } : { ok: false, skip: `@anthropic-ai/claude-code@${CLAUDE_CODE_VERSION} installed without a native binary for ${platform}` };
}

/** Codex's launcher (a Node script that runs its vendored binary). */
export function ensureCodex(): Cli {
  const dir = cacheDir('codex', CODEX_VERSION);
  const entry = path.join(dir, 'node_modules/@openai/codex/bin/codex.js');
  if (!fs.existsSync(entry)) {
    const failed = npmInstall(dir, `@openai/codex@${CODEX_VERSION}`);
    if (failed) return { ok: false, skip: failed };
  }
  return fs.existsSync(entry) ? { ok: true, command: process.execPath, args: [entry] } : { ok: false, skip: `@openai/codex@${CODEX_VERSION} installed without ${entry}` };
}

/** The environment of a CLI run: nothing inherited but PATH, a fresh HOME, and only the node reachable. */
export function isolatedEnv(home: string, nodeIp: string, extra: Record<string, string>): Record<string, string> {
  return {
    PATH: [path.dirname(process.execPath), '/usr/local/bin', '/usr/bin', '/bin'].join(':'),
    HOME: home,
    TMPDIR: home,
    LANG: 'C.UTF-8',
    TERM: 'dumb',
    NO_COLOR: '1',
    HTTPS_PROXY: DEAD_PROXY,
    HTTP_PROXY: DEAD_PROXY,
    ALL_PROXY: DEAD_PROXY,
    https_proxy: DEAD_PROXY,
    http_proxy: DEAD_PROXY,
    all_proxy: DEAD_PROXY,
    NO_PROXY: nodeIp,
    no_proxy: nodeIp,
    ...extra,
  };
}

/** Claude Code's switches: no telemetry, updates, error reports, surveys or other traffic beyond the model API. */
export function claudeEnv(home: string, nodeUrl: string, nodeIp: string, key: string): Record<string, string> {
  return isolatedEnv(home, nodeIp, {
    ANTHROPIC_BASE_URL: nodeUrl,
    ANTHROPIC_API_KEY: key,
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    DISABLE_TELEMETRY: '1',
    DISABLE_AUTOUPDATER: '1',
    DISABLE_ERROR_REPORTING: '1',
    DISABLE_BUG_COMMAND: '1',
    CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY: '1',
    CLAUDE_CODE_DISABLE_TERMINAL_TITLE: '1',
    CLAUDE_CODE_ENABLE_TELEMETRY: '0',
  });
}

/** A Codex home whose config.toml knows one provider, the node, over the Responses API; no analytics, no update check. */
export function codexHome(home: string, nodeUrl: string, model: string): string {
  const dir = path.join(home, 'codex');
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(
    path.join(dir, 'config.toml'),
    [
      `model = "${model}"`,
      'model_provider = "viiwork"',
      'check_for_update_on_startup = false',
      'approval_policy = "never"',
      'sandbox_mode = "danger-full-access"',
      '[model_providers.viiwork]',
      'name = "viiwork"',
      `base_url = "${nodeUrl}/v1"`,
      'wire_api = "responses"',
      'env_key = "VIIWORK_API_KEY"',
      '[analytics]',
      'enabled = false',
      '[feedback]',
      'enabled = false',
      '[otel]',
      'exporter = "none"',
      '',
    ].join('\n'),
  );
  return dir;
}

export interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Run a CLI to its end (bounded), in `cwd`, with stdin closed. */
export function runCli(command: string, args: string[], env: Record<string, string>, cwd: string, timeoutMs = 120_000): Promise<CliRun> {
  return new Promise((resolve) => {
    const p = spawn(command, args, { env, cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d) => (stdout += d));
    p.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
    p.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}
