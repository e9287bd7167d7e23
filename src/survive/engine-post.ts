/**
 * One JSON POST to a llama-server's own endpoints (`/slots/{id}?action=…`,
 * a completion that brings a prompt back from RAM): its answer as a
 * document, or why not, never a throw. Slot files and RAM recalls both ask
 * the engine this way.
 */
import { request } from 'undici';
import type { Backend } from '../engines/backend.ts';

export type EnginePost = { ok: true; doc: Record<string, unknown> } | { ok: false; why: string };

export async function postToEngine(b: Pick<Backend, 'authHeaders'>, url: string, path: string, body: string | Buffer, timeoutMs: number): Promise<EnginePost> {
  try {
    const r = await request(`${url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...b.authHeaders() },
      body,
      signal: AbortSignal.timeout(timeoutMs),
    });
    const text = await r.body.text();
    if (r.statusCode !== 200) return { ok: false, why: `the engine answered ${r.statusCode}: ${text.slice(0, 200)}` };
    return { ok: true, doc: JSON.parse(text) as Record<string, unknown> };
  } catch (err) {
    return { ok: false, why: (err as Error).message };
  }
}
