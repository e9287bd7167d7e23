/**
 * Helpers for the hostile-traffic tests: a Memberlist in a child process
 * that reports its own costs, LZW compression bombs, and raw sockets.
 */
import { spawn, ChildProcess } from 'node:child_process';
import dgram from 'node:dgram';
import net from 'node:net';
import { fileURLToPath } from 'node:url';
import { Writer } from '../../src/mesh/memberlist/codec/msgpack.ts';
import { MessageType, writeCompress } from '../../src/mesh/memberlist/codec/messages.ts';
import { scriptArgs } from '../helpers/script.ts';
import { waitFor, followChild } from './helpers.ts';

export interface ChildStats {
  /** Worst event-loop delay (monitorEventLoopDelay), scheduling noise included. */
  eldMaxMs: number;
  /** Worst event-loop delay the process caused itself (lateness while it was using CPU). */
  cpuStallMaxMs: number;
  cpuMs: number;
  maxRssGrowthMB: number;
  ml: Record<string, number>;
}

/** test/memberlist/child-node.ts in its own process; stdin commands, JSON lines out. */
export class ChildNode {
  readonly proc: ChildProcess;
  readonly lines: Record<string, unknown>[] = [];
  ready = false;
  stderr = '';

  constructor(name: string, ip: string, port: number, label: string, keyB64 = '', join = '', env: Record<string, string> = {}) {
    const script = fileURLToPath(new URL('./child-node.ts', import.meta.url));
    this.proc = spawn(process.execPath, [...scriptArgs(script), name, ip, String(port), label, keyB64, join], {
      stdio: ['pipe', 'pipe', 'pipe'],
      cwd: fileURLToPath(new URL('../..', import.meta.url)),
      env: { ...process.env, ...env },
    });
    followChild(this.proc, this);
  }

  async started(): Promise<void> {
    await waitFor(() => this.ready || this.proc.exitCode !== null, 30_000, 'child memberlist started');
    if (!this.ready) throw new Error(`child exited: ${this.stderr}`);
  }

  get alive(): boolean {
    return this.proc.exitCode === null && this.proc.signalCode === null;
  }

  async ask<T>(cmd: string, key: string, timeoutMs = 10_000): Promise<T> {
    const before = this.lines.length;
    this.proc.stdin!.write(cmd + '\n');
    await waitFor(() => this.lines.slice(before).some((l) => key in l), timeoutMs, `reply to ${cmd}`, 10);
    return this.lines.slice(before).find((l) => key in l)![key] as T;
  }

  mark(): Promise<boolean> {
    return this.ask('mark', 'marked');
  }

  stats(): Promise<ChildStats> {
    return this.ask('stats', 'stats');
  }

  members(): Promise<{ name: string; state: string; addr: string }[]> {
    return this.ask('members', 'members');
  }

  kill(): void {
    if (this.alive) this.proc.kill('SIGKILL');
  }
}

const LIT_WIDTH = 8;
const CLEAR = 256;
const EOF_CODE = 257;

/**
 * An LZW stream (Go's LSB, literal width 8) that expands explosively: after
 * a literal, every code is the KwKwK code (a run one byte longer each time)
 * until the table freezes at 12 bits, then `repeats` copies of the longest
 * code (~3.8 KB each). About 1.5 bytes of input per 3.8 KB of output.
 */
export function lzwBomb(repeats: number): Buffer {
  const out: number[] = [];
  let acc = 0;
  let n = 0;
  const write = (code: number, width: number) => {
    acc |= code << n;
    n += width;
    while (n >= 8) {
      out.push(acc & 0xff);
      acc >>>= 8;
      n -= 8;
    }
  };
  // mirror the decoder's width bookkeeping
  let width = LIT_WIDTH + 1;
  let hi = EOF_CODE;
  let overflow = 1 << width;
  let frozen = false;
  const step = (code: number) => {
    write(code, width);
    hi++;
    if (hi >= overflow) {
      if (width === 12) {
        frozen = true;
        hi--;
      } else {
        width++;
        overflow = 1 << width;
      }
    }
  };
  write(CLEAR, width);
  step(0);
  while (!frozen) step(hi);
  for (let i = 0; i < repeats; i++) step(hi);
  write(EOF_CODE, width);
  if (n > 0) out.push(acc & 0xff);
  return Buffer.from(out);
}

/** `[compress]{Algo:0, Buf}` around raw LZW bytes. */
export function compressMessage(lzw: Buffer): Buffer {
  const w = new Writer().byte(MessageType.compress);
  writeCompress(w, { algo: 0, buf: lzw });
  return w.toBuffer();
}

/** A UDP socket on `ip` (port 0) for sending raw packets. */
export async function rawUdp(ip: string): Promise<dgram.Socket> {
  const s = dgram.createSocket('udp4');
  await new Promise<void>((r) => s.bind(0, ip, () => r()));
  return s;
}

export function sendUdp(s: dgram.Socket, buf: Buffer, addr: string, port: number): Promise<void> {
  return new Promise((resolve, reject) => s.send(buf, port, addr, (e) => (e ? reject(e) : resolve())));
}

/** Opens a TCP connection from `localAddress`; resolves once connected. */
export function rawTcp(host: string, port: number, localAddress: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host, port, localAddress }, () => resolve(s));
    s.once('error', reject);
  });
}

/** Resolves when the other end closes the connection (or rejects after timeoutMs). */
export function closedByPeer(s: net.Socket, timeoutMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    if (s.destroyed || s.readableEnded) return resolve();
    const t = setTimeout(() => reject(new Error(`peer did not close the connection within ${timeoutMs} ms`)), timeoutMs);
    const done = () => {
      clearTimeout(t);
      resolve();
    };
    s.once('end', done);
    s.once('close', done);
    s.on('error', () => {});
    s.resume();
  });
}

/** The stall assertions every hostile test makes on a child's stats. */
export function assertCheap(s: ChildStats, what: string, limits = { stallMs: 50, cpuMs: 300, rssMB: 64 }): string {
  const line = `${what}: event loop stalled ${s.cpuStallMaxMs.toFixed(1)} ms (raw delay ${s.eldMaxMs.toFixed(1)} ms), CPU ${s.cpuMs.toFixed(0)} ms, peak RSS +${s.maxRssGrowthMB.toFixed(1)} MB`;
  if (!(s.cpuStallMaxMs < limits.stallMs)) throw new Error(line);
  // the raw delay includes the machine's scheduling noise, hence a looser bound (the bugs this guards against stalled for seconds)
  if (!(s.eldMaxMs < 250)) throw new Error(line);
  if (!(s.cpuMs < limits.cpuMs)) throw new Error(line);
  if (!(s.maxRssGrowthMB < limits.rssMB)) throw new Error(line);
  return line;
}
