/**
 * haproxy as a benchmark arm: a generated config in a scratch dir, loopback
 * only, one thread, HTTP mode with keep-alive to the servers, each chunk
 * of a streamed answer forwarded at once (option http-no-delay), no logging.
 */
import fs from 'node:fs';
import path from 'node:path';
import { startProc, untilListening, type Proc } from './procs.ts';

export interface HaproxyOptions {
  dir: string;
  listen: string; // host:port
  upstreams: { name: string; addr: string }[];
  /** haproxy's `balance` algorithm: leastconn, roundrobin, ... */
  balance: string;
  /** Name the server that answered in an X-Upstream response header. */
  upstreamHeader?: boolean;
}

export function haproxyConfig(o: HaproxyOptions): string {
  return `global
  maxconn 8192
  nbthread 1
  pidfile ${o.dir}/haproxy.pid

defaults
  mode http
  timeout connect 5s
  timeout client 300s
  timeout server 300s
  timeout http-keep-alive 60s
  option http-keep-alive
  # Streamed answers: forward each chunk at once (haproxy otherwise may hold data back to merge it, as nginx with proxy_buffering on)
  option http-no-delay
  http-reuse always
  retries 0

frontend bench
  bind ${o.listen}
  default_backend engines

backend engines
  balance ${o.balance}
${o.upstreamHeader ? '  http-response set-header X-Upstream %[srv_name]\n' : ''}${o.upstreams.map((u) => `  server ${u.name} ${u.addr} maxconn 4096`).join('\n')}
`;
}

export async function startHaproxy(name: string, o: HaproxyOptions): Promise<Proc> {
  const conf = path.join(o.dir, 'haproxy.cfg');
  fs.writeFileSync(conf, haproxyConfig(o));
  // -db: stay in the foreground, no daemon; -W off: no master process.
  const p = startProc(name, 'haproxy', ['-db', '-f', conf], { dir: o.dir });
  await untilListening(p, o.listen, name, 10_000);
  return p;
}
