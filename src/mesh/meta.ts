/**
 * Node metadata gossiped with every alive message (SPEC section 5): at most
 * 512 bytes of JSON {"v":2,"api":port,"ver":"x.y.z","role":"node"|"gateway"}.
 * Anything else (a Serf agent's tags, say) makes the member `foreign`.
 */

export type Role = 'node' | 'gateway' | 'foreign';

export interface NodeMeta {
  role: Role;
  api?: number;
  ver?: string;
}

export const META_LIMIT = 512;

export function encodeMeta(m: { api: number; ver: string; role: 'node' | 'gateway' }): Buffer {
  const buf = Buffer.from(JSON.stringify({ v: 2, api: m.api, ver: m.ver, role: m.role }));
  if (buf.length > META_LIMIT) throw new Error(`node metadata is ${buf.length} bytes; the limit is ${META_LIMIT}`);
  return buf;
}

export function parseMeta(buf: Buffer | undefined): NodeMeta {
  if (!buf || buf.length === 0 || buf[0] !== 0x7b) return { role: 'foreign' };
  try {
    const doc = JSON.parse(buf.toString('utf8')) as Record<string, unknown>;
    if (!doc || typeof doc !== 'object' || Array.isArray(doc) || doc.v !== 2) return { role: 'foreign' };
    const api = typeof doc.api === 'number' && Number.isInteger(doc.api) && doc.api > 0 && doc.api < 65536 ? doc.api : undefined;
    if (api === undefined) return { role: 'foreign' };
    return { role: doc.role === 'gateway' ? 'gateway' : 'node', api, ver: typeof doc.ver === 'string' ? doc.ver : undefined };
  } catch {
    return { role: 'foreign' };
  }
}
