/**
 * What every discovery source has in common: it proposes gossip addresses
 * ("ip:port", IPv6 as "[ip]:port") that the rejoin loop may join. A feeder
 * never throws out of `candidates()` on an ordinary failure (it logs and
 * returns what it has); the loop guards against the ones that do anyway.
 */

export interface Feeder {
  /** Short name for logs: "seeds", "tailnet", "mdns". */
  readonly name: string;
  /** Addresses to join now. Duplicates and alive members are fine: the loop filters. */
  candidates(): Promise<string[]>;
}

/** Operator log line with structured fields (same shape as the engines'). */
export type Logger = (msg: string, fields?: Record<string, unknown>) => void;

export const silentLogger: Logger = () => {};

/**
 * Logs a condition only when it changes: the same error every rejoin
 * interval is one line, its recovery another.
 */
export class ChangeLogger {
  #last: string | undefined;

  constructor(private readonly log: Logger) {}

  /** Report a problem; logged when it differs from the last one reported. */
  problem(message: string, fields?: Record<string, unknown>): void {
    if (this.#last === message) return;
    this.#last = message;
    this.log(message, fields);
  }

  /** Report that things work; logged once after a problem. */
  ok(message: string, fields?: Record<string, unknown>): void {
    if (this.#last === undefined) return;
    this.#last = undefined;
    this.log(message, fields);
  }
}

/** "ip:port" for IPv4, "[ip]:port" for IPv6. */
export function joinHostPort(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}
