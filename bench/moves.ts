/**
 * Issue 43's target for moving a cache (SPEC 13): a conversation of about
 * 2k tokens moved between two members; its next turn's time to first token
 * against a cold prefill of the same prompt on the same host (target: the
 * move ≤ 0.5× cold), and the share of the moved prompt the engine reports
 * cached (≥ 95%).
 *
 * Two real nodes (`viiwork serve`, open mesh, 127.0.217.1-2), each running
 * the real llama-server (`npm run engine`) on the "mid" GGUF our own code
 * writes (4 layers, n_embd 512, n_ff 4096, F32: its prefill on one thread
 * takes about a CPU host's time per token of a small real model), one slot
 * each, `--threads 1`, the engine's RAM prompt cache off (else the cold arm
 * restores its prompt from RAM). Each round, with a conversation of its own:
 *   1. its first turn runs on A (pinned);
 *   2. move: its next turn is sent to A pinned to B (as when A is full,
 *      draining or unloading): B takes A's slot and restores it, then runs;
 *   3. a filler conversation on each node overwrites both slots;
 *   4. cold: the same next turn, pinned to B: nobody holds it, B prefills.
 * TTFT is the client's, to the first streamed content chunk. Env:
 * MOVES_ROUNDS (3).
 */
import path from 'node:path';
import { request } from 'undici';
import { machineInfo, scratchDir } from './lib/procs.ts';
import { getJson, startMeshNode, stopAll, waitSeesFile, type MeshNode } from '../test/helpers/mesh.ts';
import { waitFor } from '../test/fakes/wait.ts';
import { writeTinyGguf } from '../test/fakes/tiny-gguf.ts';
import { realLlamaServer } from '../test/helpers/engine.ts';

const IP = (n: number) => `127.0.217.${n}`;
type Msg = { role: string; content: string };

/** About 2k tokens (the tiny vocabulary spells most text a character a token), its own for each round. */
function conversation(round: number, what: string): Msg[] {
  const log = Array.from({ length: 40 }, (_, i) => `${what} ${round}, day ${i + 1}: the ship sailed on, wind steady. `).join('').slice(0, 1900);
  return [
    { role: 'system', content: `You keep a ship log. ${log}` },
    { role: 'user', content: `Entry one of voyage ${round}.` },
  ];
}

/** One streamed turn: the client's TTFT, the engine's prompt and cached tokens. */
async function turn(url: string, messages: Msg[], host: string): Promise<{ ttftMs: number; prompt: number; cached: number; reply: string; node: string }> {
  const t0 = performance.now();
  const r = await request(`${url}/v1/chat/completions?host=${host}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'tiny', messages, max_tokens: 4, temperature: 0, grammar: 'root ::= [a-z ]+', stream: true, stream_options: { include_usage: true } }),
  });
  let ttft: number | undefined;
  let text = '';
  let reply = '';
  let usage: { prompt_tokens?: number; prompt_tokens_details?: { cached_tokens?: number } } | undefined;
  for await (const chunk of r.body) {
    text += String(chunk);
    let i;
    while ((i = text.indexOf('\n\n')) >= 0) {
      const ev = text.slice(0, i);
      text = text.slice(i + 2);
      const data = ev.replace(/^data: /, '');
      if (data === '[DONE]' || !data.startsWith('{')) continue;
      const doc = JSON.parse(data);
      const c = doc.choices?.[0]?.delta?.content;
      if (c) {
        ttft ??= performance.now() - t0;
        reply += c;
      }
      if (doc.usage) usage = doc.usage;
    }
  }
  if (r.statusCode !== 200) throw new Error(`turn on ${host}: ${r.statusCode} ${text}`);
  return { ttftMs: ttft ?? performance.now() - t0, prompt: usage?.prompt_tokens ?? 0, cached: usage?.prompt_tokens_details?.cached_tokens ?? 0, reply, node: String(r.headers['x-viiwork-node']) };
}

export async function benchMoves(): Promise<Record<string, unknown>> {
  const rounds = Number(process.env.MOVES_ROUNDS ?? 3);
  const engine = realLlamaServer();
  if (engine.skip) throw new Error(engine.skip);
  const dir = scratchDir('viiwork-bench-moves-');
  const shape = { nEmbd: 512, nLayers: 4, nHeads: 8, nFf: 4096, contextLength: 4096 };
  const file = writeTinyGguf(path.join(dir, 'mid.gguf'), { ...shape, seed: 1 });
  // The engine's RAM prompt cache off (cache_ram: 0): it would restore the cold arm's prompt from RAM, so it is not cold.
  const entry = { name: 'tiny', engine: 'llamacpp', path: file, parallel: 1, context: 4096, cache_ram: 0, llamacpp: { binary: engine.binary, args: ['--threads', '1'] } };
  const nodes: MeshNode[] = [];
  const out: Record<string, unknown>[] = [];
  try {
    const a = await startMeshNode({ name: 'mv-a', ip: IP(1), models: [entry] });
    nodes.push(a);
    const b = await startMeshNode({ name: 'mv-b', ip: IP(2), models: [entry], seeds: [a.gossip] });
    nodes.push(b);
    await waitSeesFile(a, 'tiny', 'mv-b', undefined, 90_000);
    await waitSeesFile(a, 'tiny', 'mv-a', undefined, 90_000);
    await waitFor(async () => (await getJson(`${a.url}/v1/fleet/capacity`)).models.find((m: any) => m.name === 'tiny')?.hosts.filter((h: any) => h.fresh && h.slots > 0).length === 2, { timeoutMs: 90_000, what: 'both serve' });
    // One throwaway turn each: the engines' first requests warm their buffers.
    await turn(a.url, conversation(0, 'warm'), 'mv-a');
    await turn(b.url, conversation(0, 'warm-b'), 'mv-b');
    let seen = (await getJson(`${b.url}/v1/decisions?since=0`)).last;
    for (let r = 1; r <= rounds; r++) {
      const msgs = conversation(r, 'voyage');
      const first = await turn(a.url, msgs, 'mv-a');
      const next = [...msgs, { role: 'assistant', content: first.reply }, { role: 'user', content: 'Entry two: wind from the west.' }];
      const moved = await turn(a.url, next, 'mv-b');
      const feed = await getJson(`${b.url}/v1/decisions?since=${seen}`);
      seen = feed.last;
      const d = feed.data.find((x: any) => x.moved_from) ?? {};
      await turn(a.url, conversation(r, 'filler-a'), 'mv-a');
      await turn(b.url, conversation(r, 'filler-b'), 'mv-b');
      const cold = await turn(b.url, next, 'mv-b');
      seen = (await getJson(`${b.url}/v1/decisions?since=${seen}`)).last;
      const row = {
        round: r,
        prompt_tokens: moved.prompt,
        move_outcome: d.move_outcome ?? 'none',
        moved_tokens: d.moved_tokens ?? 0,
        moved_bytes: d.moved_bytes ?? 0,
        moved_ms: d.moved_ms ?? null,
        move_ttft_ms: Math.round(moved.ttftMs),
        move_cached: moved.cached,
        cold_ttft_ms: Math.round(cold.ttftMs),
        cold_cached: cold.cached,
        ratio: +(moved.ttftMs / cold.ttftMs).toFixed(3),
        cached_share: d.moved_tokens ? +(moved.cached / d.moved_tokens).toFixed(3) : 0,
      };
      out.push(row);
      console.log(JSON.stringify(row));
    }
  } finally {
    await stopAll(nodes);
  }
  const ratios = out.map((r) => r.ratio as number).sort((x, y) => x - y);
  return { ...machineInfo(), rounds: out, median_ratio: ratios[Math.floor(ratios.length / 2)] ?? null, target: 'move TTFT ≤ 0.5× cold prefill on the same host; ≥ 95% of the moved prompt cached' };
}

export function printMoves(doc: Record<string, unknown>): void {
  console.table(doc.rounds as object[]);
  console.log(`median move/cold TTFT: ${doc.median_ratio}`);
}
