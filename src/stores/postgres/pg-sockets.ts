// Types only: pg-wal-stream.ts uses these and must not load pg with its module (txbox/pglite re-exports the relay store).
import type pg from 'pg';

/** How long ending a client may wait for the server's goodbye before its socket is destroyed. */
const END_WAIT_MS = 2000;

/** Destroys a client's socket at once: every statement waiting on it fails, and nothing waits for the server. */
export function destroySocket(c: pg.ClientBase): void {
  (c as unknown as { connection?: { stream?: { destroy?: () => void } } }).connection?.stream?.destroy?.();
}

/** Ends a client, or destroys its socket when the server does not answer the goodbye in time (a silent server). */
export async function endOrAbandon(c: pg.Client): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<void>((resolve) => {
    timer = setTimeout(() => {
      destroySocket(c);
      resolve();
    }, END_WAIT_MS);
  });
  await Promise.race([c.end().catch(() => {}), late]);
  clearTimeout(timer);
}
