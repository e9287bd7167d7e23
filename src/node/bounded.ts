/** Resolves when `p` settles or after `ms`, whichever comes first: a start never waits longer for one step (node.ts `#warm`). */
export function bounded(p: Promise<unknown>, ms: number): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    t.unref();
    void p.then(
      () => (clearTimeout(t), resolve()),
      () => (clearTimeout(t), resolve()),
    );
  });
}
