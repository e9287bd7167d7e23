/**
 * The CLI's side of a node's HTTP API: one call with errors an operator can
 * act on, and plain tables.
 */
import { request } from 'undici';
import { API_KEY_ENV } from '../security/secret.ts';

export const DEFAULT_NODE_URL = 'http://127.0.0.1:8086';

/** A refusal by the node, or no answer from it: its message is what the operator reads. */
export class NodeCallError extends Error {}

/** The node's client key, when it needs one, from VIIWORK_API_KEY. */
export function keyHeader(): Record<string, string> {
  const key = process.env[API_KEY_ENV];
  return key ? { authorization: `Bearer ${key}` } : {};
}

export async function call<T>(base: string, method: 'GET' | 'PUT' | 'DELETE' | 'POST' | 'PATCH', path: string, body?: unknown): Promise<T> {
  const url = new URL(path, base.endsWith('/') ? base : `${base}/`);
  let res;
  try {
    res = await request(url, {
      method,
      headers: { ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...keyHeader() },
      body: body === undefined ? undefined : JSON.stringify(body),
      headersTimeout: 10_000,
      bodyTimeout: 10_000,
    });
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    throw new NodeCallError(`cannot reach the node at ${url.origin} (${e.code ?? e.message}); is \`viiwork serve\` running there? (--url)`);
  }
  const text = await res.body.text();
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    doc = undefined;
  }
  if (res.statusCode >= 400) {
    const message = (doc as { error?: { message?: string } } | undefined)?.error?.message;
    throw new NodeCallError(message ?? `the node answered ${res.statusCode}: ${text.slice(0, 200)}`);
  }
  if (doc === undefined) throw new NodeCallError(`the node answered something that is not JSON: ${text.slice(0, 200)}`);
  return doc as T;
}

/** Control characters: C0, DEL and C1. Line feeds and tabs are kept where text runs over lines (`printable`). */
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/g;
const CONTROL_BUT_LINES = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g;
const escaped = (c: string) => `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`;

/**
 * Text from a node (model names a client chose, key names, error messages)
 * as it may reach an operator's terminal: every control character written
 * as `\xHH`, so none moves the cursor, recolours, retitles or writes the
 * clipboard (OSC 52) (issue 46: a user key's model name with escapes forged
 * rows in `viiwork top`). `lines`: keep line feeds and tabs (a whole
 * screen); a table cell keeps none.
 */
export function printable(text: string, lines = true): string {
  return text.replace(lines ? CONTROL_BUT_LINES : CONTROL, escaped);
}

/** Rows as left-aligned columns separated by two spaces; the first row is the header. Cells are made printable. */
export function formatTable(rows: string[][]): string {
  const safe = rows.map((row) => row.map((cell) => printable(cell, false)));
  const widths: number[] = [];
  for (const row of safe) row.forEach((cell, i) => (widths[i] = Math.max(widths[i] ?? 0, cell.length)));
  return safe.map((row) => row.map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i]))).join('  ')).join('\n') + '\n';
}

/** Standard output for every CLI view: printable, whatever a node sent (JSON.stringify leaves DEL and C1 raw). */
export const out = (text: string) => process.stdout.write(printable(text));

/** Run one command's body; a failure prints `viiwork: <message>` and sets exit status 1. */
export function run<A extends unknown[]>(fn: (...args: A) => Promise<void>): (...args: A) => Promise<void> {
  return async (...args: A) => {
    try {
      await fn(...args);
    } catch (err) {
      process.stderr.write(`viiwork: ${printable((err as Error).message)}\n`);
      process.exitCode = 1;
    }
  };
}

