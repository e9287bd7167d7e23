/** nginx as a benchmark arm: a generated config in a scratch dir, loopback only, one worker, keep-alive upstream. */
import fs from 'node:fs';
import path from 'node:path';
import { startProc, untilListening, type Proc } from './procs.ts';

export interface NginxOptions {
  dir: string;
  listen: string; // host:port
  upstreams: string[]; // host:port
  /** e.g. 'least_conn;' (empty: nginx's default round robin) */
  balance?: string;
  workers?: number;
  /** Name the upstream that answered (its address) in an X-Upstream response header. */
  upstreamHeader?: boolean;
}

export function nginxConfig(o: NginxOptions): string {
  const d = o.dir;
  for (const sub of ['body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']) fs.mkdirSync(path.join(d, sub), { recursive: true });
  return `daemon off;
master_process on;
worker_processes ${o.workers ?? 1};
pid ${d}/nginx.pid;
error_log ${d}/error.log warn;
${process.getuid?.() === 0 ? 'user root;' : ''}
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${d}/body;
  proxy_temp_path ${d}/proxy;
  fastcgi_temp_path ${d}/fastcgi;
  uwsgi_temp_path ${d}/uwsgi;
  scgi_temp_path ${d}/scgi;
  keepalive_requests 1000000;
  keepalive_timeout 60s;
  upstream engines {
    ${o.balance ?? ''}
${o.upstreams.map((u) => `    server ${u} max_fails=0;`).join('\n')}
    keepalive 256;
    keepalive_requests 1000000;
  }
  server {
    listen ${o.listen};
    location / {
      proxy_pass http://engines;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 300s;
      proxy_next_upstream off;${o.upstreamHeader ? '\n      add_header X-Upstream $upstream_addr always;' : ''}
    }
  }
}
`;
}

export async function startNginx(name: string, o: NginxOptions): Promise<Proc> {
  const conf = path.join(o.dir, 'nginx.conf');
  fs.writeFileSync(conf, nginxConfig(o));
  const p = startProc(name, 'nginx', ['-p', o.dir, '-c', conf, '-e', path.join(o.dir, 'error.log')], { dir: o.dir });
  await untilListening(p, o.listen, name, 10_000, () => safeRead(path.join(o.dir, 'error.log')));
  return p;
}

function safeRead(f: string): string {
  try {
    return fs.readFileSync(f, 'utf8').slice(-2000);
  } catch {
    return '';
  }
}
