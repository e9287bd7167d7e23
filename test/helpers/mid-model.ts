/**
 * The "mid" GGUF our own code writes for real-engine tests of slot caches
 * (4 layers, n_embd 512, F32: its prefill on one thread takes seconds, its
 * KV a few MiB, as a real model on a CPU host), its model entry, and one
 * chat turn through a node that reports where it ran and what it found cached.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { request } from 'undici';
import { writeTinyGguf } from '../fakes/tiny-gguf.ts';
import { waitFor } from '../fakes/wait.ts';
import { realLlamaServer } from './engine.ts';
import { getJson, startMeshNode, waitSeesFile, type MeshNode } from './mesh.ts';

const SHAPE = { nEmbd: 512, nLayers: 4, nHeads: 8, nFf: 4096, contextLength: 4096 };

export function midModel(dir: string, seed = 1): string {
  return writeTinyGguf(path.join(dir, `mid-${seed}.gguf`), { ...SHAPE, seed });
}

/** The model entry `tiny` of `file`: one slot, one thread, the real llama-server. */
export const entryOf = (file: string, context = 4096) => ({ name: 'tiny', engine: 'llamacpp', path: file, parallel: 1, context, llamacpp: { binary: realLlamaServer().binary, args: ['--threads', '1'] } });

export interface Turn {
  host: string;
  prompt: number;
  cached: number;
  reply: string;
}

/** One chat turn through `url` (pinned to `host` when named): where it ran, its prompt and cached tokens, its reply. */
export async function ask(url: string, messages: { role: string; content: string }[], host?: string): Promise<Turn> {
  const body = { model: 'tiny', messages, max_tokens: 4, temperature: 0, grammar: 'root ::= [a-z ]+' };
  const r = await request(`${url}/v1/chat/completions${host ? `?host=${host}` : ''}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await r.body.text();
  assert.equal(r.statusCode, 200, text);
  const doc = JSON.parse(text);
  return { host: String(r.headers['x-viiwork-node']), prompt: doc.usage.prompt_tokens, cached: doc.usage.prompt_tokens_details?.cached_tokens ?? 0, reply: doc.choices[0].message.content };
}

/** Whether `viewer` sees `tiny` serving on every one of `names`: fresh, not draining, with slots and the file. */
export async function tinyServing(viewer: MeshNode, names: readonly string[]): Promise<boolean> {
  const hosts = (await getJson(`${viewer.url}/v1/fleet/capacity`)).models.find((m: any) => m.name === 'tiny')?.hosts ?? [];
  return names.every((n) => hosts.some((h: any) => h.node === n && h.fresh && !h.draining && h.slots > 0 && h.has_file === true));
}

/**
 * The precondition of a move between `members`: each sees every member's copy of the file hashed and published (a
 * move is only between the same file), and `viewer` sees `tiny` serving on all of them.
 */
export async function waitTinyServing(viewer: MeshNode, members: readonly MeshNode[]): Promise<void> {
  for (const m of members) for (const n of members) await waitSeesFile(m, 'tiny', n.name, undefined, 90_000);
  const names = members.map((m) => m.name);
  await waitFor(() => tinyServing(viewer, names), { timeoutMs: 90_000, what: `${viewer.name} sees tiny serving on ${names.join(' and ')}` });
}

/**
 * A gateway `G` at `${net}.10` (no model) and two members named `names` at `.11` and `.12` serving `tiny` of `file`,
 * seeded by G and pushed onto `nodes` (for the caller's `stopAll`); returns once G sees `tiny` serving on both.
 */
export async function startGatewayAndPair(nodes: MeshNode[], net: string, names: readonly [string, string], file: string): Promise<{ g: MeshNode; a: MeshNode; b: MeshNode }> {
  const g = await startMeshNode({ name: 'G', ip: `${net}.10` });
  nodes.push(g);
  const a = await startMeshNode({ name: names[0], ip: `${net}.11`, models: [entryOf(file)], seeds: [g.gossip] });
  const b = await startMeshNode({ name: names[1], ip: `${net}.12`, models: [entryOf(file)], seeds: [g.gossip] });
  nodes.push(a, b);
  await waitTinyServing(g, [a, b]);
  return { g, a, b };
}
