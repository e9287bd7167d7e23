/**
 * One memberlist node in its own process, for the membership benchmark
 * (bench/membership.ts). LAN defaults, label '', optional AES key. By
 * default memberlist runs on a worker thread (MemberlistThread), as in a
 * viiwork node; MEMBERSHIP_ENGINE=direct runs the bare Memberlist instead.
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
import { Memberlist, type Member } from '../src/mesh/memberlist/memberlist.ts';
import { MemberlistThread } from '../src/mesh/thread/memberlist-thread.ts';

const [name, ip, port, keyB64] = process.argv.slice(2);
const out = (o: object) => process.stdout.write(JSON.stringify(o) + '\n');

const config = { name, bindAddr: ip, port: Number(port), label: '', keys: keyB64 ? [Buffer.from(keyB64, 'base64')] : [] };
const logger = (level: string, msg: string) => {
  if (level !== 'debug') out({ log: level, msg });
};
const nodeMeta = () => Buffer.from(JSON.stringify({ v: 2, api: 8086, ver: 'bench', role: 'node' }));
/** What this child uses, the same on both engines. */
interface Engine {
  members(): Member[];
  join(addrs: string[]): Promise<{ joined: number; errors: Error[] }>;
  on(ev: 'join' | 'update' | 'leave', fn: (m: Member) => void): unknown;
}
// MEMBERSHIP_ENGINE=thread (default): memberlist on its own thread, as a viiwork node runs it; direct: the bare Memberlist on the main thread.
const ml: Engine =
  process.env.MEMBERSHIP_ENGINE === 'direct'
    ? await Memberlist.create({ ...config, logger }, { nodeMeta, notifyMsg: () => {}, localState: () => Buffer.from([0x80]), mergeRemoteState: () => {} })
    : await MemberlistThread.start({ config, nodeMeta, localState: Buffer.from([0x80]), logger, logLevels: ['info', 'warn', 'error'] });
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
