/**
 * Request bodies still arriving, per client address (api.max_open_bodies):
 * a client that opens many uploads and trickles each one holds a socket and
 * a growing buffer per upload, so past the cap the next is refused before a
 * byte of it is read.
 */
export class OpenBodies {
  readonly #open = new Map<string, number>();

  constructor(readonly perAddress: number) {}

  /** Count one more body from `address`; false (nothing counted) when that address is at the cap. */
  enter(address: string): boolean {
    const n = this.#open.get(address) ?? 0;
    if (n >= this.perAddress) return false;
    this.#open.set(address, n + 1);
    return true;
  }

  /** One body from `address` has arrived whole, failed or been dropped. */
  leave(address: string): void {
    const n = this.#open.get(address) ?? 0;
    // Deleted at zero, so the map holds only addresses with uploads in progress.
    if (n <= 1) this.#open.delete(address);
    else this.#open.set(address, n - 1);
  }

  count(address: string): number {
    return this.#open.get(address) ?? 0;
  }
}
