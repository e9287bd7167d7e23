/**
 * A pump that may be called again from inside itself: a placement settles a
 * waiter, whose continuation can release a slot or enqueue, which pumps.
 * Such a call does not recurse; it asks for one more pass once this one ends.
 */
export class Reentrant {
  #running = false;
  #again = false;

  constructor(private readonly pass: () => void) {}

  run(): void {
    if (this.#running) {
      this.#again = true;
      return;
    }
    this.#running = true;
    try {
      do {
        this.#again = false;
        this.pass();
      } while (this.#again);
    } finally {
      this.#running = false;
    }
  }
}
