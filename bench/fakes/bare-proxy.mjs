// The yardstick of the overhead benchmark: the least a Node pass-through
// can do. node:http in, one undici Agent and stream() out, hop-by-hop
// headers dropped, client disconnects passed on, nothing buffered.
// Usage: node bare-proxy.mjs HOST PORT UPSTREAM_ORIGIN
import http from 'node:http';
import { Agent, stream } from 'undici';

const [host, port, upstream] = process.argv.slice(2);
const agent = new Agent({ keepAliveTimeout: 30_000, connections: 256 });
const HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade', 'host']);
const pick = (h) => Object.fromEntries(Object.entries(h).filter(([k]) => !HOP.has(k)));

http
  .createServer((req, res) => {
    const ac = new AbortController();
    res.on('close', () => res.writableFinished || ac.abort());
    const hasBody = req.method !== 'GET' && req.method !== 'HEAD';
    stream(
      `${upstream}${req.url}`,
      { method: req.method, headers: pick(req.headers), body: hasBody ? req : undefined, dispatcher: agent, signal: ac.signal },
      ({ statusCode, headers }) => {
        res.writeHead(statusCode, pick(headers));
        return res;
      },
    ).catch(() => {
      if (!res.headersSent) res.writeHead(502);
      res.end();
    });
  })
  .listen(Number(port), host, () => console.log(`bare proxy on ${host}:${port} -> ${upstream}`));
