/**
 * Issue 18, acceptance 3: prompt-cache hygiene, measured on the sim engine's
 * prompt cache with the real Claude Code. Two sessions with different first
 * prompts: Claude Code's first system block (`x-anthropic-billing-header:
 * cc_version=…;`) changes with the prompt. With api.agent_hygiene on (the
 * default) the node removes it, and the second session reads ≥ 90% of its
 * system prompt and tools from the cache; with it off, the prompt differs
 * from its first line and the cache gives nothing past that line.
 *
 * A recording proxy between Claude Code and the node keeps what Claude Code
 * sent and the usage the node answered (cache_read_input_tokens).
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { renderPrompt, tokenCount } from '../../src/engines/prompt-cache.ts';
import { messagesToChat } from '../../src/messages/index.ts';
import { startMeshNode, stopAll, type MeshNode } from '../helpers/mesh.ts';
import { tempDir } from '../helpers/node.ts';
import { claudeEnv, ensureClaudeCode, runCli, type Cli } from './clis.ts';

const IP = (n: number) => `127.0.100.${n}`;
const MODEL = 'agent-sim';

interface Exchange {
  body: any;
  /** cache_read_input_tokens of the answer's message_delta (streamed) or usage (whole). */
  cacheRead: number | undefined;
}

/** A proxy on `ip` that forwards everything to `target` and records each /v1/messages exchange. */
async function recordingProxy(ip: string, target: string): Promise<{ url: string; exchanges: Exchange[]; close(): Promise<void> }> {
  const exchanges: Exchange[] = [];
  const server = http.createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (c) => parts.push(c));
    req.on('end', async () => {
      const body = Buffer.concat(parts);
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string' && !['host', 'content-length', 'connection', 'accept-encoding'].includes(k)) headers[k] = v;
      try {
        const r = await request(target + req.url, { method: req.method as 'POST', headers, body: body.length ? body : undefined });
        const text = await r.body.text();
        if (req.url?.startsWith('/v1/messages') && !req.url.includes('count_tokens')) {
          let cacheRead: number | undefined;
          for (const m of text.matchAll(/^data: (.*)$/gm)) {
            const ev = JSON.parse(m[1]);
            if (ev.type === 'message_delta') cacheRead = ev.usage?.cache_read_input_tokens;
          }
          if (cacheRead === undefined && text.startsWith('{')) cacheRead = JSON.parse(text).usage?.cache_read_input_tokens;
          exchanges.push({ body: JSON.parse(body.toString('utf8')), cacheRead });
        }
        res.writeHead(r.statusCode, { 'content-type': String(r.headers['content-type'] ?? 'application/json') });
        res.end(text);
      } catch (err) {
        res.writeHead(502).end(String(err));
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, ip, r));
  return { url: `http://${ip}:${(server.address() as AddressInfo).port}`, exchanges, close: () => new Promise((r) => server.close(() => r())) };
}

/** Tokens of the system prompt and tools alone, as the sim renders what the engine got from this request. */
function systemAndToolsTokens(body: unknown, hygiene: boolean): number {
  const t = messagesToChat(body, { hygiene });
  assert.ok(t.ok);
  const system = t.chat.messages.filter((m) => m.role === 'system').slice(0, 1);
  const text = renderPrompt(true, { messages: system, tools: t.chat.tools })!;
  return tokenCount(text.slice(0, -'<|assistant|>\n'.length));
}

const sim = { ttft_ms: 5, prefill_ms_per_1k: 1, tokens_per_s: 2000, output_tokens: 8 };

describe('prompt-cache hygiene: two Claude Code sessions with different first prompts on the sim engine', () => {
  let claude: Cli;
  let on: MeshNode, off: MeshNode;
  before(async () => {
    claude = ensureClaudeCode();
    if (!claude.ok) return;
    // One slot each, so the second session meets what the first left in it.
    on = await startMeshNode({ name: 'H1', ip: IP(11), models: [{ name: MODEL, engine: 'sim', parallel: 1, sim }] });
    off = await startMeshNode({ name: 'H0', ip: IP(12), api: { agent_hygiene: false }, models: [{ name: MODEL, engine: 'sim', parallel: 1, sim }] });
  });
  after(() => stopAll([on, off]));

  async function twoSessions(node: MeshNode, ip: string): Promise<Exchange[]> {
    const proxy = await recordingProxy(ip, node.url);
    try {
      // One user, one project: the same HOME and directory (Claude Code's system prompt names both), two sessions.
      const home = tempDir('viiwork-claude-hygiene-');
      for (const prompt of ['Say hello to the first session, please.', 'Something else entirely: list three colours.']) {
        const r = await runCli((claude as { command: string }).command, ['-p', prompt, '--model', MODEL], claudeEnv(home, proxy.url, ip, 'sk-none'), home);
        assert.equal(r.code, 0, r.stderr);
        assert.match(r.stdout, /simulated/);
      }
      return proxy.exchanges;
    } finally {
      await proxy.close();
    }
  }

  it('hygiene on: the second session reads at least 90% of its system prompt and tools from the cache', async (t) => {
    if (!claude.ok) return t.skip(claude.skip);
    const ex = await twoSessions(on, IP(13));
    const [first, second] = [ex[0], ex.at(-1)!];
    // The two sessions' billing blocks differ: without hygiene they would share nothing.
    assert.notEqual(first.body.system[0].text, second.body.system[0].text);
    assert.match(second.body.system[0].text, /^x-anthropic-billing-header:/);
    const prefix = systemAndToolsTokens(second.body, true);
    assert.ok(prefix > 5000, `system prompt and tools: ${prefix} tokens`);
    assert.ok(second.cacheRead !== undefined && second.cacheRead >= 0.9 * prefix, `cached ${second.cacheRead} of ${prefix}`);
    t.diagnostic(`hygiene on: cached ${second.cacheRead} tokens; system prompt and tools ${prefix}`);
  });

  it('hygiene off (api.agent_hygiene: false): the second session gets nothing from the cache past the billing line', async (t) => {
    if (!claude.ok) return t.skip(claude.skip);
    const ex = await twoSessions(off, IP(14));
    const second = ex.at(-1)!;
    const prefix = systemAndToolsTokens(second.body, false);
    // What the two prompts share is the opening of the billing line itself ("<|system|>\nx-anthropic-billing-header: cc_version=…"),
    // and whatever the sim renders before the system prompt (nothing: it renders tools after it, as ChatML templates do).
    const chat = messagesToChat(second.body, { hygiene: false });
    assert.ok(chat.ok);
    const before = tokenCount(renderPrompt(true, { messages: chat.chat.messages, tools: chat.chat.tools })!.split('<|system|>\n')[0]) - 1;
    const billingLine = tokenCount(`<|system|>\n${second.body.system[0].text}`);
    assert.ok(second.cacheRead !== undefined && second.cacheRead <= before + billingLine, `cached ${second.cacheRead}, billing line ${billingLine} tokens, before the system prompt ${before}, prefix ${prefix}`);
    t.diagnostic(`hygiene off: cached ${second.cacheRead} tokens of ${prefix}`);
  });
});
