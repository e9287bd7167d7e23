/**
 * Seeds: the "ip:port" list of `mesh.seeds`, offered on every rejoin round
 * whatever the network mode. A seed given as a host name is resolved on
 * each round (IPv4 first), so an operator's DNS change is picked up; one
 * that does not resolve is logged once and skipped.
 */
import dns from 'node:dns';
import net from 'node:net';
import { ChangeLogger, joinHostPort, silentLogger, type Feeder, type Logger } from './feeder.ts';

export type Lookup = (host: string) => Promise<string>;

const defaultLookup: Lookup = async (host) => (await dns.promises.lookup(host, { family: 0, order: 'ipv4first' })).address;

/** Split "host:port" or "[v6]:port"; undefined when malformed. */
export function splitHostPort(addr: string): { host: string; port: number } | undefined {
  const m = /^\[([0-9A-Fa-f:.]+)\]:(\d{1,5})$/.exec(addr) ?? /^([^\s:[\]]+):(\d{1,5})$/.exec(addr);
  if (!m) return undefined;
  const port = Number(m[2]);
  if (port < 1 || port > 65535) return undefined;
  return { host: m[1], port };
}

export class SeedFeeder implements Feeder {
  readonly name = 'seeds';
  readonly #seeds: string[];
  readonly #lookup: Lookup;
  readonly #problems = new Map<string, ChangeLogger>();
  readonly #log: Logger;

  constructor(seeds: readonly string[], opts: { lookup?: Lookup; log?: Logger } = {}) {
    this.#seeds = [...new Set(seeds.map((s) => s.trim()).filter((s) => s !== ''))];
    this.#lookup = opts.lookup ?? defaultLookup;
    this.#log = opts.log ?? silentLogger;
  }

  #logger(seed: string): ChangeLogger {
    let l = this.#problems.get(seed);
    if (!l) this.#problems.set(seed, (l = new ChangeLogger(this.#log)));
    return l;
  }

  async candidates(): Promise<string[]> {
    const out = await Promise.all(
      this.#seeds.map(async (seed) => {
        const hp = splitHostPort(seed);
        if (!hp) {
          this.#logger(seed).problem(`seed ${seed} is not "ip:port"; skipped`, { seed });
          return undefined;
        }
        if (net.isIP(hp.host)) return joinHostPort(hp.host, hp.port);
        try {
          const ip = await this.#lookup(hp.host);
          this.#logger(seed).ok(`seed ${seed} resolves again`, { seed, ip });
          return joinHostPort(ip, hp.port);
        } catch (err) {
          this.#logger(seed).problem(`seed ${seed} does not resolve: ${(err as Error).message}`, { seed });
          return undefined;
        }
      }),
    );
    return [...new Set(out.filter((a): a is string => a !== undefined))];
  }
}
