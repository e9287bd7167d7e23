/** Shared helpers for memberlist tests: wait on a condition with a deadline. */
export async function waitFor(cond: () => boolean | Promise<boolean>, timeoutMs: number, what: string, stepMs = 50): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, stepMs));
  }
}
