/** A client-facing HTTP server around a real Dispatcher, for dispatch tests that bring their own ports (no whole node). */
import http from 'node:http';
import { parseInference } from '../../src/api/request.ts';
import type { Dispatcher } from '../../src/dispatch/dispatcher.ts';
import { sendError, type ApiError } from '../../src/http/errors.ts';
import { endpointFor } from '../../src/workloads/workloads.ts';

export function entryServer(dispatcher: Dispatcher): http.Server {
  return http.createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const u = new URL(req.url!, 'http://x');
    try {
      await dispatcher.serveClient(await parseInference(req, u, endpointFor(u.pathname)!, Buffer.concat(chunks)), res, new AbortController().signal);
    } catch (err) {
      sendError(res, err as ApiError);
    }
  });
}
