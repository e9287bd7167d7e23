// The Portkey AI gateway (@portkey-ai/gateway, installed by bench/lib/portkey.ts) as a
// benchmark arm, listening on HOST:PORT only. Its start-server.js takes
// --port but always listens on every interface; this wrapper makes the
// listen call use HOST, then runs it unchanged (--headless: no web UI).
// Custom hosts on loopback other than 127.0.0.1 must be named in
// TRUSTED_CUSTOM_HOSTS (the caller sets it).
// Usage: node portkey-gateway.mjs HOST PORT ENTRY (the gateway's build/start-server.js)
import net from 'node:net';
import { pathToFileURL } from 'node:url';

const [host, port, entry] = process.argv.slice(2);
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === 'number' || typeof args[0] === 'string') {
    const cb = args.find((a) => typeof a === 'function');
    return listen.call(this, Number(args[0]), host, cb);
  }
  if (args[0] && typeof args[0] === 'object') args[0] = { ...args[0], host };
  return listen.apply(this, args);
};
process.argv = [process.argv[0], entry, `--port=${port}`, '--headless'];
await import(pathToFileURL(entry).href);
