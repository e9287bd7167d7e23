/** One HTTP call with an optional JSON body: its status, headers, text, and the text parsed as JSON when it is JSON. */
import { request } from 'undici';

export async function call(url: string, method: string, headers: Record<string, string>, body?: unknown) {
  const r = await request(url, { method: method as 'GET', headers: { ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers }, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await r.body.text();
  let json: any;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: r.statusCode, headers: r.headers, json, text };
}

/**
 * A POST whose answer is left open once its headers are read (a stream a test holds while it sends more): the
 * status, the headers and the body to read; `close` leaves it, as a client that closes the connection does.
 */
export async function openPost(url: string, headers: Record<string, string>, body: unknown) {
  const ac = new AbortController();
  const r = await request(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body), signal: ac.signal });
  return {
    status: r.statusCode,
    headers: r.headers,
    body: r.body,
    close: async () => {
      ac.abort();
      await r.body.dump().catch(() => {});
    },
  };
}
