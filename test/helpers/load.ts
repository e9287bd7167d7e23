/**
 * Steady load for tests that need a fleet at work: `concurrency` loops of
 * chat completions into one node until stopped, half of them streamed, each
 * with its own conversation so they spread over the hosts.
 */
import { request } from 'undici';

export interface Load {
  /** Requests answered so far, by status. */
  readonly answered: Map<number, number>;
  stop(): Promise<void>;
}

export function startLoad(url: string, model: string, concurrency = 6): Load {
  const answered = new Map<number, number>();
  let running = true;
  let n = 0;
  const loop = async (worker: number) => {
    while (running) {
      const i = n++;
      try {
        const r = await request(`${url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model, stream: i % 2 === 0, max_tokens: 8, messages: [{ role: 'user', content: `worker ${worker} request ${i}: ${'tell me more '.repeat(1 + (i % 5))}` }] }),
        });
        await r.body.text();
        answered.set(r.statusCode, (answered.get(r.statusCode) ?? 0) + 1);
      } catch {
        // A node stopping under the load: the test's own checks say whether that matters.
      }
    }
  };
  const loops = Array.from({ length: concurrency }, (_, w) => loop(w));
  return {
    answered,
    async stop() {
      running = false;
      await Promise.all(loops);
    },
  };
}
