/**
 * Operator logs: one line per state change, named member or model. Debug
 * lines (one per request) only with VIIWORK_DEBUG=1.
 */
import pino from 'pino';

export type Log = {
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  debug(msg: string, fields?: Record<string, unknown>): void;
  /** Debug lines are written (VIIWORK_DEBUG=1 when the log was made): a caller on the request path builds its fields only then. */
  readonly debugging?: boolean;
};

export const debugEnabled = () => process.env.VIIWORK_DEBUG === '1';

export function createLog(name: string, opts: { json?: boolean; destination?: NodeJS.WritableStream } = {}): Log {
  const json = opts.json ?? process.env.VIIWORK_LOG_FORMAT === 'json';
  if (json) {
    const p = pino({ level: debugEnabled() ? 'debug' : 'info', base: { node: name } }, opts.destination as never);
    return {
      info: (m, f) => p.info(f ?? {}, m),
      warn: (m, f) => p.warn(f ?? {}, m),
      error: (m, f) => p.error(f ?? {}, m),
      debug: (m, f) => p.debug(f ?? {}, m),
      debugging: p.isLevelEnabled('debug'),
    };
  }
  const out = opts.destination ?? process.stderr;
  // Read once: process.env is a slow property lookup, and debug is called once per request.
  const debugging = debugEnabled();
  const line = (level: string, msg: string) => {
    const t = new Date().toISOString().slice(11, 23);
    out.write(`${t} ${level} [${name}] ${msg}\n`);
  };
  return {
    info: (m) => line('INFO ', m),
    warn: (m) => line('WARN ', m),
    error: (m) => line('ERROR', m),
    debug: (m, f) => {
      if (debugging) line('DEBUG', f ? `${m} ${JSON.stringify(f)}` : m);
    },
    debugging,
  };
}
