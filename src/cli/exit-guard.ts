/**
 * A finished command must end its process. Every command closes what it
 * opened, but a client whose server went away mid-run (a Kafka admin retrying
 * against a broker that was killed, a socket whose peer never answers the
 * close) can hold the event loop open after the command has reported: the
 * process then hangs, and whatever waits for it (a supervisor, a CI step, a
 * shell script) waits with it. So once `main` has returned, the process gets
 * `graceMs` to end by itself; if it has not, the guard names on stderr what is
 * still open (resource kinds and socket addresses, never data) and exits with
 * the command's own code. The timer is unref'd: a process that ends by itself
 * ends as before.
 */

interface SocketLike {
  remoteAddress?: string;
  remotePort?: number;
  localPort?: number;
  _handle?: { constructor?: { name?: string } };
}

/** What still holds the event loop: the resource kinds, and each TCP socket's addresses. */
export function openResources(): string[] {
  const kinds = process.getActiveResourcesInfo().filter((r) => r !== 'TTYWrap' && r !== 'PipeWrap');
  const handles = (process as unknown as { _getActiveHandles?: () => SocketLike[] })._getActiveHandles?.() ?? [];
  const sockets = handles
    .filter((h) => h._handle?.constructor?.name === 'TCP' && h.remotePort !== undefined)
    .map((s) => `socket ${s.localPort ?? '?'} -> ${s.remoteAddress}:${s.remotePort}`);
  const counts = new Map<string, number>();
  for (const k of kinds) counts.set(k, (counts.get(k) ?? 0) + 1);
  return [...[...counts].map(([k, n]) => (n > 1 ? `${k} x${n}` : k)), ...sockets];
}

/** Exits with `code` after `graceMs` unless the process has ended by itself by then. */
export function exitWhenDone(code: number, graceMs: number, what = 'txbox'): void {
  const timer = setTimeout(() => {
    process.stderr.write(`${what}: finished, but still open after ${graceMs / 1000} s: ${openResources().join(', ') || 'nothing listed'}; exiting with code ${code}\n`);
    process.exit(code);
  }, graceMs);
  timer.unref();
}
