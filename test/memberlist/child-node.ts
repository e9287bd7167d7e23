/**
 * A Memberlist in its own process, for tests that need to SIGKILL it.
 * argv: name ip port label keyBase64|'' join(ip:port)|''
 * stdout: one JSON line per event ({"event":"join",...}) and "READY".
 */
import { Memberlist } from '../../src/mesh/memberlist/memberlist.ts';

const [name, ip, port, label, keyB64, join] = process.argv.slice(2);
const debug = !!process.env.ML_DEBUG;
const ml = await Memberlist.create(
  {
    name,
    bindAddr: ip,
    port: Number(port),
    label,
    keys: keyB64 ? [Buffer.from(keyB64, 'base64')] : [],
    logger: (level, msg, fields) => {
      if (level !== 'debug' || debug) process.stderr.write(`${level} ${msg} ${JSON.stringify(fields ?? {})}\n`);
    },
  },
  {
    nodeMeta: () => Buffer.from(JSON.stringify({ v: 2, api: 8086, ver: 'test', role: 'node' })),
    notifyMsg: () => {},
    localState: () => Buffer.from([0x80]),
    mergeRemoteState: () => {},
  },
);
const out = (o: object) => process.stdout.write(JSON.stringify(o) + '\n');
for (const ev of ['join', 'update', 'leave'] as const) {
  ml.on(ev, (m) => out({ event: ev, name: m.name, addr: m.addr, state: m.state }));
}
ml.on('conflict', (m, info) => {
  out({ event: 'conflict', name: m.name, addr: m.addr, duringJoin: info.duringJoin });
});
process.stdin.setEncoding('utf8');
process.stdin.on('data', async (line: string) => {
  for (const cmd of line.split('\n').filter(Boolean)) {
    if (cmd === 'members') out({ members: ml.members().map((m) => ({ name: m.name, state: m.state, addr: m.addr })) });
    else if (cmd.startsWith('join ')) out({ joinResult: await ml.join([cmd.slice(5)]).then((r) => ({ joined: r.joined, errors: r.errors.map(String) })) });
    else if (cmd === 'leave') {
      await ml.leave(5000);
      await ml.shutdown();
      out({ left: true });
      process.exit(0);
    }
  }
});
if (join) out({ joinResult: await ml.join([join]).then((r) => ({ joined: r.joined, errors: r.errors.map(String) })) });
process.stdout.write('READY\n');
