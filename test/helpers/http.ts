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
