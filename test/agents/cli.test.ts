/**
 * Issue 18, acceptance 1: the real Claude Code and Codex CLIs through a
 * secured two-node mesh (entry E without models, with client keys; executor
 * X with a scripted engine that speaks only chat completions). Each CLI
 * prints the engine's answer and completes a tool round trip: the engine's
 * first answer calls the CLI's own shell tool running `echo`, its second
 * quotes the tool result it was sent back, which the CLI prints. Codex also
 * runs a function of a `namespace` tool. Claude Code streams, and falls back
 * to a whole answer when a stream breaks.
 *
 * The CLIs are installed from npm on first use (test/agents/clis.ts) and the
 * suite skips with the reason when they cannot be. They reach nothing but E.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { startFakeEngine, type FakeEngine } from '../fakes/fake-engine.ts';
import { request } from 'undici';
import { waitFor } from '../fakes/wait.ts';
import { startMeshNode, stopAll, waitConverged, type MeshNode } from '../helpers/mesh.ts';
import { tempDir } from '../helpers/node.ts';
import { claudeEnv, codexHome, ensureClaudeCode, ensureCodex, isolatedEnv, runCli, type Cli } from './clis.ts';

const IP = (n: number) => `127.0.100.${n}`;
const MODEL = 'agent-model';
const KEY = 'sk-agent-e2e';

type Msg = { role: string; content?: unknown; tool_calls?: unknown };
const textOf = (c: unknown): string => (typeof c === 'string' ? c : Array.isArray(c) ? c.map((p) => (typeof p?.text === 'string' ? p.text : '')).join('') : '');

/**
 * The scripted engine: a tool result comes back quoted; a prompt with a
 * marker gets a call of the CLI's tool for it; anything else a greeting.
 */
function script(json: any): { text: string } | { call: { name: string; arguments: string } } {
  const messages: Msg[] = Array.isArray(json.messages) ? json.messages : [];
  const tools: string[] = (json.tools ?? []).map((t: any) => t.function?.name);
  const last = messages.at(-1);
  if (last?.role === 'tool') return { text: `The tool answered: ${textOf(last.content).trim().slice(0, 200)}` };
  const said = messages.filter((m) => m.role === 'user').map((m) => textOf(m.content)).join('\n');
  if (said.includes('RUN_BASH') && tools.includes('Bash')) return { call: { name: 'Bash', arguments: JSON.stringify({ command: 'echo viiwork-bash-4242', description: 'Print a marker' }) } };
  if (said.includes('RUN_EXEC') && tools.includes('exec_command')) return { call: { name: 'exec_command', arguments: JSON.stringify({ cmd: 'echo viiwork-exec-4343' }) } };
  if (said.includes('RUN_NS') && tools.includes('multi_agent_v1__close_agent')) return { call: { name: 'multi_agent_v1__close_agent', arguments: JSON.stringify({ target: 'no-such-agent-77' }) } };
  return { text: 'Hello from the scripted engine.' };
}

describe('Claude Code and Codex through a secured two-node mesh', () => {
  let engine: FakeEngine;
  let e: MeshNode, x: MeshNode;
  let claude: Cli;
  let codex: Cli;

  before(async () => {
    claude = ensureClaudeCode();
    codex = ensureCodex();
    if (!claude.ok && !codex.ok) return;
    engine = await startFakeEngine({ name: 'scripted', model: MODEL, script });
    const env = { VIIWORK_MESH_SECRET: crypto.randomBytes(32).toString('base64') };
    e = await startMeshNode({ name: 'E', ip: IP(1), env: { ...env, AGENT_KEYS: KEY }, api: { keys_env: 'AGENT_KEYS' } });
    x = await startMeshNode({ name: 'X', ip: IP(2), env, seeds: [e.gossip], models: [{ name: MODEL, engine: 'openai', url: engine.url, parallel: 4, context: 8192 }] });
    await waitConverged([x]);
    // E asks for its client key on every read endpoint too.
    await waitFor(
      async () => {
        const r = await request(`${e.url}/v1/fleet/capacity`, { headers: { authorization: `Bearer ${KEY}` } });
        const doc = (await r.body.json()) as { models?: { name: string; hosts: { node: string; fresh: boolean; slots: number }[] }[] };
        return !!doc.models?.find((m) => m.name === MODEL)?.hosts.some((h) => h.node === 'X' && h.fresh && h.slots > 0);
      },
      { timeoutMs: 20_000, what: `${MODEL} on X seen from E` },
    );
  });
  after(async () => {
    await stopAll([e, x]);
    await engine?.close();
  });

  function claudeRun(prompt: string, extra: string[] = []) {
    assert.ok(claude.ok);
    const home = tempDir('viiwork-claude-home-');
    return runCli(claude.command, [...claude.args, '-p', prompt, '--model', MODEL, ...extra], claudeEnv(home, e.url, e.ip, KEY), home);
  }

  function codexRun(prompt: string) {
    assert.ok(codex.ok);
    const home = tempDir('viiwork-codex-home-');
    const env = isolatedEnv(home, e.ip, { CODEX_HOME: codexHome(home, e.url, MODEL), VIIWORK_API_KEY: KEY });
    return runCli(codex.command, [...codex.args, 'exec', '--skip-git-repo-check', prompt], env, home);
  }

  const bodies = (path: string) => engine.bodiesFor(path);

  it('Claude Code -p prints the engine answer (streamed)', async (t) => {
    if (!claude.ok) return t.skip(claude.skip);
    engine.resetCounters();
    const r = await claudeRun('say hi');
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /Hello from the scripted engine\./);
    const sent = bodies('/v1/chat/completions');
    assert.ok(sent.length >= 1);
    assert.ok(sent.every((b) => b.stream === true));
    // Translated: the billing block is gone, one leading system message, Claude Code's tools offered as functions.
    const first = sent[0];
    assert.equal(first.messages[0].role, 'system');
    assert.ok(!first.messages[0].content.includes('x-anthropic-billing-header'));
    assert.equal(first.messages.filter((m: Msg) => m.role === 'system').length, 1);
    assert.ok(first.tools.some((tool: any) => tool.function.name === 'Bash'));
    assert.ok(first.max_tokens <= 8192);
  });

  it('Claude Code completes a Bash tool round trip and prints the answer quoting the tool result', async (t) => {
    if (!claude.ok) return t.skip(claude.skip);
    engine.resetCounters();
    const r = await claudeRun('RUN_BASH please', ['--allowedTools', 'Bash']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /The tool answered: viiwork-bash-4242/);
    const sent = bodies('/v1/chat/completions');
    const second = sent.find((b) => b.messages.at(-1)?.role === 'tool');
    assert.ok(second, 'the tool result came back to the engine');
    const call = second.messages.at(-2);
    assert.equal(call.role, 'assistant');
    assert.equal(call.tool_calls[0].function.name, 'Bash');
  });

  it('Claude Code falls back to a whole answer when the stream breaks, and prints it', async (t) => {
    if (!claude.ok) return t.skip(claude.skip);
    engine.resetCounters();
    engine.failMidStream();
    const r = await claudeRun('say hi');
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /Hello from the scripted engine\./);
    const sent = bodies('/v1/chat/completions');
    assert.ok(sent.some((b) => b.stream === true) && sent.some((b) => b.stream !== true), JSON.stringify(sent.map((b) => b.stream)));
  });

  it('Codex exec prints the engine answer (streamed Responses API)', async (t) => {
    if (!codex.ok) return t.skip(codex.skip);
    engine.resetCounters();
    const r = await codexRun('say hi');
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /Hello from the scripted engine\./);
    const first = bodies('/v1/chat/completions')[0];
    assert.equal(first.stream, true);
    const names = first.tools.map((tool: any) => tool.function.name);
    assert.ok(names.includes('exec_command'));
    assert.ok(names.includes('multi_agent_v1__close_agent'), names.join(','));
    assert.ok(!names.some((n: string) => n.includes('web_search')));
  });

  it('Codex completes an exec_command round trip and prints the answer quoting the command output', async (t) => {
    if (!codex.ok) return t.skip(codex.skip);
    engine.resetCounters();
    const r = await codexRun('RUN_EXEC please');
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /The tool answered: .*viiwork-exec-4343/s);
  });

  it('Codex runs a function of a namespace tool: the call came back with its namespace and bare name', async (t) => {
    if (!codex.ok) return t.skip(codex.skip);
    engine.resetCounters();
    const r = await codexRun('RUN_NS please');
    assert.equal(r.code, 0, r.stderr);
    const sent = bodies('/v1/chat/completions');
    const second = sent.find((b) => b.messages.at(-1)?.role === 'tool');
    assert.ok(second, 'the namespaced call was answered by Codex');
    const replayed = second.messages.at(-2);
    // Codex replays the call with its namespace; the engine sees the flat name it was offered again.
    assert.equal(replayed.tool_calls[0].function.name, 'multi_agent_v1__close_agent');
    const output = textOf(second.messages.at(-1).content);
    // close_agent's own handler ran: it parsed the target (an unknown name would be "unsupported call").
    assert.match(output, /invalid agent id no-such-agent-77/, output);
    assert.match(r.stdout, /The tool answered:/);
  });
});
