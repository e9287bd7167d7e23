/**
 * Network namespaces a test creates and deletes itself (root only), linked
 * by veth pairs made directly inside them, so the host's own namespace and
 * its real interfaces are never touched.
 */
import { execFileSync } from 'node:child_process';

export function ip(...args: string[]): void {
  execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });
}

export interface Link {
  /** [namespace, device, address/prefix] of each end. */
  a: [string, string, string];
  b: [string, string, string];
  /** Route 224.0.0.0/4 (mDNS) over this link on the given ends. */
  multicast?: ('a' | 'b')[];
}

export class Namespaces {
  readonly #created: string[] = [];
  /** Why the namespaces could not be made (not root, no `ip`), for t.skip. */
  skip: string | undefined;

  constructor(readonly names: string[], links: Link[]) {
    if (process.platform !== 'linux' || process.getuid?.() !== 0) {
      this.skip = 'needs root on Linux to create network namespaces';
      return;
    }
    try {
      for (const n of names) {
        ip('netns', 'add', n);
        this.#created.push(n);
        ip('-n', n, 'link', 'set', 'lo', 'up');
      }
      for (const l of links) {
        ip('link', 'add', l.a[1], 'netns', l.a[0], 'type', 'veth', 'peer', 'name', l.b[1], 'netns', l.b[0]);
        for (const [n, dev, addr] of [l.a, l.b]) {
          ip('-n', n, 'addr', 'add', addr, 'dev', dev);
          ip('-n', n, 'link', 'set', dev, 'up');
        }
        for (const end of l.multicast ?? []) ip('-n', l[end][0], 'route', 'add', '224.0.0.0/4', 'dev', l[end][1]);
      }
    } catch (err) {
      this.skip = `ip netns setup failed: ${String((err as { stderr?: Buffer }).stderr ?? (err as Error).message).trim()}`;
    }
  }

  delete(): void {
    for (const n of this.#created.splice(0)) {
      try {
        ip('netns', 'del', n);
      } catch {
        // already gone
      }
    }
  }
}
