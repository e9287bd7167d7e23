/**
 * A client's view of a streamed answer for the cut-stream tests: the events
 * as they arrive, readable while the stream is still open (so a test can
 * kill the executor once the answer is under way), and the whole once it ends.
 */
import { request } from 'undici';
import { waitFor } from '../fakes/wait.ts';

export interface ClientEvent {
  type?: string;
  data: string;
}

export interface OpenStream {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  events: ClientEvent[];
  /** Resolves when the body has ended (or failed: `error` says why). */
  ended: Promise<void>;
  error?: string;
  /** Waits until `pred` holds over the events so far. */
  until(pred: (events: ClientEvent[]) => boolean, what: string, timeoutMs?: number): Promise<void>;
}

export async function openStream(url: string, body: unknown, headers: Record<string, string> = {}): Promise<OpenStream> {
  const r = await request(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  const s: OpenStream = {
    status: r.statusCode,
    headers: r.headers,
    events: [],
    ended: Promise.resolve(),
    until: (pred, what, timeoutMs = 30_000) => waitFor(() => pred(s.events), { timeoutMs, what }).then(() => {}),
  };
  let pending = '';
  s.ended = (async () => {
    try {
      for await (const chunk of r.body) {
        pending += (chunk as Buffer).toString('utf8');
        for (let i = pending.indexOf('\n\n'); i >= 0; i = pending.indexOf('\n\n')) {
          const raw = pending.slice(0, i);
          pending = pending.slice(i + 2);
          let type: string | undefined;
          const data: string[] = [];
          for (const line of raw.split('\n')) {
            if (line.startsWith('event:')) type = line.slice(6).trim();
            else if (line.startsWith('data:')) data.push(line.slice(5).trimStart());
          }
          s.events.push({ ...(type ? { type } : {}), data: data.join('\n') });
        }
      }
    } catch (err) {
      s.error = (err as Error).message;
    }
    if (pending.trim()) s.error = `${s.error ?? ''} a partial event was left: ${pending.slice(0, 80)}`;
  })();
  return s;
}

/** The parsed JSON of each event that has some (skipping `[DONE]`). */
export function jsonEvents(events: ClientEvent[]): { type?: string; json: any }[] {
  const out: { type?: string; json: any }[] = [];
  for (const e of events) {
    if (e.data === '[DONE]' || e.data === '') continue;
    out.push({ ...(e.type ? { type: e.type } : {}), json: JSON.parse(e.data) });
  }
  return out;
}

/** The content text a chat stream carried, in order. */
export function chatText(events: ClientEvent[]): string {
  return jsonEvents(events)
    .map((e) => e.json.choices?.[0]?.delta?.content ?? '')
    .join('');
}

/** Chat chunks that carried content. */
export function chatContentEvents(events: ClientEvent[]): number {
  return jsonEvents(events).filter((e) => (e.json.choices?.[0]?.delta?.content ?? '') !== '').length;
}
