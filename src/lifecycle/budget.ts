/**
 * `node.memory_budget: auto` (SPEC section 11): the GPUs' memory as
 * `nvidia-smi` (else `rocm-smi`) reports it, less what processes other than
 * this node's engines use, re-read every 10 s; with no GPU tool, 75% of RAM.
 * The parsers are pure and tested on recorded outputs of both tools (the
 * project's machines have no GPU); the query is a thin edge around them.
 */
import { execFile } from 'node:child_process';
import os from 'node:os';

/** What one read of the GPUs says, in bytes. */
export interface GpuMemory {
  tool: 'nvidia-smi' | 'rocm-smi';
  total: number;
  used: number;
  /** Bytes used per process id, when the tool lists processes (nvidia-smi does). */
  byPid?: Map<number, number>;
}

const MIB = 1024 * 1024;

/** `nvidia-smi --query-gpu=memory.total,memory.used --format=csv,noheader,nounits`: one line per GPU, in MiB. */
export function parseNvidiaGpus(text: string): { total: number; used: number } | undefined {
  let total = 0;
  let used = 0;
  let n = 0;
  for (const line of text.split('\n')) {
    if (!line.trim()) continue;
    const [t, u] = line.split(',').map((s) => Number(s.trim()));
    if (!Number.isFinite(t) || !Number.isFinite(u)) return undefined;
    total += t * MIB;
    used += u * MIB;
    n++;
  }
  return n ? { total, used } : undefined;
}

/** `nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits`: MiB per process (a pid on two GPUs is summed). */
export function parseNvidiaApps(text: string): Map<number, number> {
  const out = new Map<number, number>();
  for (const line of text.split('\n')) {
    const [p, m] = line.split(',').map((s) => s.trim());
    const pid = Number(p);
    const mib = Number(m);
    if (!p || !Number.isInteger(pid) || !Number.isFinite(mib)) continue;
    out.set(pid, (out.get(pid) ?? 0) + mib * MIB);
  }
  return out;
}

/** `rocm-smi --showmeminfo vram --json`: per card "VRAM Total Memory (B)" and "VRAM Total Used Memory (B)". */
export function parseRocmSmi(text: string): { total: number; used: number } | undefined {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof doc !== 'object' || doc === null) return undefined;
  let total = 0;
  let used = 0;
  let n = 0;
  for (const [card, v] of Object.entries(doc as Record<string, Record<string, string>>)) {
    if (!card.startsWith('card') || typeof v !== 'object' || v === null) continue;
    const t = Number(v['VRAM Total Memory (B)']);
    const u = Number(v['VRAM Total Used Memory (B)']);
    if (!Number.isFinite(t) || !Number.isFinite(u)) continue;
    total += t;
    used += u;
    n++;
  }
  return n ? { total, used } : undefined;
}

/**
 * The budget from one GPU read: total less what others use. Others' use is
 * what the tool reports for processes not ours when it lists processes;
 * otherwise everything used less what this node's own backends account for
 * (never below zero: a budget is never oversold).
 */
export function budgetFromGpu(gpu: GpuMemory, ourPids: ReadonlySet<number>, ourAccounted: number): number {
  let others: number;
  if (gpu.byPid && gpu.byPid.size) {
    let ours = 0;
    for (const [pid, bytes] of gpu.byPid) if (ourPids.has(pid)) ours += bytes;
    others = gpu.used - ours;
  } else {
    others = gpu.used - Math.min(gpu.used, ourAccounted);
  }
  return Math.max(0, gpu.total - Math.max(0, others));
}

/** 75% of RAM: the budget of a machine with no GPU tool. */
export function ramBudget(totalRam = os.totalmem()): number {
  return Math.floor(totalRam * 0.75);
}

export type Runner = (cmd: string, args: string[]) => Promise<string>;

const run: Runner = (cmd, args) =>
  new Promise((resolve, reject) => execFile(cmd, args, { timeout: 5000, maxBuffer: 1 << 20 }, (err, out) => (err ? reject(err) : resolve(String(out)))));

/** The GPU tools, in the order they are asked. */
export const GPU_TOOLS = ['nvidia-smi', 'rocm-smi'] as const;

const notInstalled = (err: unknown) => (err as { code?: unknown })?.code === 'ENOENT';

/**
 * One read of the GPUs through whichever tool answers; undefined when neither
 * does. A tool that is not installed is added to `missing` and not run again
 * (spawning a missing binary blocks the event loop for tens of ms).
 */
export async function queryGpus(runner: Runner = run, missing: Set<string> = new Set()): Promise<GpuMemory | undefined> {
  if (!missing.has('nvidia-smi')) try {
    const gpus = parseNvidiaGpus(await runner('nvidia-smi', ['--query-gpu=memory.total,memory.used', '--format=csv,noheader,nounits']));
    if (gpus) {
      const apps = await runner('nvidia-smi', ['--query-compute-apps=pid,used_memory', '--format=csv,noheader,nounits']).catch(() => '');
      return { tool: 'nvidia-smi', ...gpus, byPid: parseNvidiaApps(apps) };
    }
  } catch (err) {
    // no nvidia-smi (or it failed): try the next tool
    if (notInstalled(err)) missing.add('nvidia-smi');
  }
  if (!missing.has('rocm-smi')) try {
    const r = parseRocmSmi(await runner('rocm-smi', ['--showmeminfo', 'vram', '--json']));
    if (r) return { tool: 'rocm-smi', ...r };
  } catch (err) {
    // no rocm-smi either
    if (notInstalled(err)) missing.add('rocm-smi');
  }
  return undefined;
}

/** How often `auto` re-reads the GPUs. */
export const BUDGET_REREAD_MS = 10_000;

/**
 * The node's budget: fixed when configured; with `auto`, read at start and
 * every BUDGET_REREAD_MS. `source` says where the figure came from, for the
 * log and `viiwork check`.
 */
export class MemoryBudget {
  #bytes: number;
  source: string;
  #timer: NodeJS.Timeout | undefined;
  /** GPU tools found not installed: never run again. */
  readonly #missing = new Set<string>();

  constructor(
    readonly configured: number | 'auto',
    private readonly ours: () => { pids: ReadonlySet<number>; accounted: number } = () => ({ pids: new Set(), accounted: 0 }),
    private readonly runner: Runner = run,
  ) {
    this.#bytes = configured === 'auto' ? ramBudget() : configured;
    this.source = configured === 'auto' ? '75% of RAM' : 'node.memory_budget';
  }

  get bytes(): number {
    return this.#bytes;
  }

  /** Read the GPUs once (auto only); keeps the last figure when the tool fails. */
  async refresh(): Promise<void> {
    if (this.configured !== 'auto') return;
    const gpu = await queryGpus(this.runner, this.#missing);
    if (!gpu) {
      this.#bytes = ramBudget();
      this.source = '75% of RAM';
      return;
    }
    const o = this.ours();
    this.#bytes = budgetFromGpu(gpu, o.pids, o.accounted);
    this.source = `${gpu.tool}: GPU memory less other processes' use`;
  }

  /** Start re-reading every BUDGET_REREAD_MS (auto only). */
  async start(): Promise<void> {
    if (this.configured !== 'auto') return;
    await this.refresh();
    // No GPU tool installed: the budget is 75% of RAM, which does not change; nothing to re-read.
    if (GPU_TOOLS.every((t) => this.#missing.has(t))) return;
    this.#timer = setInterval(() => void this.refresh(), BUDGET_REREAD_MS);
    this.#timer.unref();
  }

  stop(): void {
    clearInterval(this.#timer);
  }
}
