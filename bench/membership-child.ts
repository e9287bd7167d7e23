/**
 * One memberlist node in its own process, for the membership benchmark
 * (bench/membership.ts). LAN defaults, label '', optional AES key.
 *
 * argv: name ip port keyBase64|''
 * stdin (one command a line):  join <ip:port>  |  members
 * stdout (one JSON object a line):
 *   {"ready":true}                                 after the sockets are bound
 *   {"ev":"join"|"update"|"leave","n":name,"s":state}   membership events
 *   {"log":"info"|"warn"|"error","msg":...}         the memberlist's own log (suspicions, refutations)
 *   {"joined":n,"errors":[...]}                    answer to join
 *   {"members":[[name,state],...]}                 answer to members
 */
import { Memberlist } from '../src/mesh/memberlist/memberlist.ts';

const [name, ip, port, keyB64] = process.argv.slice(2);
const out = (o: object) => process.stdout.write(JSON.stringify(o) + '\n');

const ml = await Memberlist.create(
  {
    name,
    bindAddr: ip,
    port: Number(port),
    label: '',
    keys: keyB64 ? [Buffer.from(keyB64, 'base64')] : [],
    logger: (level, msg) => {
      if (level !== 'debug') out({ log: level, msg });
    },
  },
  {
    nodeMeta: () => Buffer.from(JSON.stringify({ v: 2, api: 8086, ver: 'bench', role: 'node' })),
    notifyMsg: () => {},
    localState: () => Buffer.from([0x80]),
    mergeRemoteState: () => {},
  },
);
for (const ev of ['join', 'update', 'leave'] as const) ml.on(ev, (m) => out({ ev, n: m.name, s: m.state }));

let buf = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (chunk: string) => {
  buf += chunk;
  let i: number;
  while ((i = buf.indexOf('\n')) >= 0) {
    const cmd = buf.slice(0, i).trim();
    buf = buf.slice(i + 1);
    if (cmd === 'members') out({ members: ml.members().map((m) => [m.name, m.state]) });
    else if (cmd.startsWith('join ')) void ml.join([cmd.slice(5)]).then((r) => out({ joined: r.joined, errors: r.errors.map(String) }));
  }
});
// The parent going away (even by SIGKILL) closes our stdin: leave no orphan behind.
process.stdin.on('end', () => process.exit(0));
out({ ready: true });
