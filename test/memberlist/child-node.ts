/**
 * A Memberlist in its own process, for tests that need to SIGKILL it.
 * argv: name ip port label keyBase64|'' join(ip:port)|''
 * stdout: one JSON line per event ({"event":"join",...}) and "READY".
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Memberlist } from '../../src/mesh/memberlist/memberlist.ts';

// 'mark' starts a measurement window; 'stats' reports the event loop's worst
// delay, CPU time and peak RSS growth since the mark, plus memberlist's counters.
const eld = monitorEventLoopDelay({ resolution: 5 });
eld.enable();
// The worst stall this process caused itself: a 5 ms ticker's lateness,
// counted only as far as this process used CPU meanwhile (on a loaded
// machine a process that is merely descheduled is late without stalling).
let cpuStallMaxMs = 0;
{
  let lastWall = performance.now();
  let lastCpu = process.cpuUsage();
  setInterval(() => {
    const wall = performance.now();
    const cpu = process.cpuUsage();
    const late = wall - lastWall - 5;
    const used = (cpu.user - lastCpu.user + cpu.system - lastCpu.system) / 1000;
    cpuStallMaxMs = Math.max(cpuStallMaxMs, Math.min(late, used));
    lastWall = wall;
    lastCpu = cpu;
  }, 5).unref();
}
let mark = { cpu: process.cpuUsage(), maxRss: process.resourceUsage().maxRSS };

const [name, ip, port, label, keyB64, join] = process.argv.slice(2);
const debug = !!process.env.ML_DEBUG;
const ml = await Memberlist.create(
  {
    name,
    bindAddr: ip,
    port: Number(port),
    label,
    keys: keyB64 ? [Buffer.from(keyB64, 'base64')] : [],
    ...(process.env.ML_TCP_TIMEOUT_MS ? { tcpTimeoutMs: Number(process.env.ML_TCP_TIMEOUT_MS) } : {}),
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
    if (cmd === 'mark') {
      eld.reset();
      cpuStallMaxMs = 0;
      mark = { cpu: process.cpuUsage(), maxRss: process.resourceUsage().maxRSS };
      out({ marked: true });
    } else if (cmd === 'stats') {
      const cpu = process.cpuUsage(mark.cpu);
      out({
        stats: {
          eldMaxMs: eld.max / 1e6,
          cpuStallMaxMs,
          cpuMs: (cpu.user + cpu.system) / 1000,
          maxRssGrowthMB: (process.resourceUsage().maxRSS - mark.maxRss) / 1024,
          ml: ml.stats(),
        },
      });
    } else if (cmd === 'members') out({ members: ml.members().map((m) => ({ name: m.name, state: m.state, addr: m.addr })) });
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
