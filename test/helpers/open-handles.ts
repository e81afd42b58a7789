/**
 * The open-handle check at the end of a broker test file: a consumer or
 * transport that leaves a socket, timer or child process behind keeps a
 * user's process from exiting, so the file fails. The failure names each
 * socket by its addresses (which client left it), and then destroys what is
 * left, so that a failing file ends at once instead of hanging until the
 * runner's per-file limit.
 */
import type { Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

const IGNORED = new Set(['TTYWrap', 'PipeWrap', 'FSReqCallback', 'StatWatcher', 'SignalWrap']);

interface Handle {
  constructor?: { name?: string };
  destroy?: () => void;
  unref?: () => void;
}

const activeHandles = (): Handle[] => (process as unknown as { _getActiveHandles(): Handle[] })._getActiveHandles();

/** A TCP socket (not stdin/stdout/stderr, which are pipes or TTYs). */
function isTcpSocket(h: Handle): h is Handle & Socket {
  return (h as { _handle?: { constructor?: { name?: string } } })._handle?.constructor?.name === 'TCP';
}

function describeSocket(s: Socket): string {
  const local = s.localPort === undefined ? '?' : String(s.localPort);
  const remote = s.remoteAddress === undefined ? 'unconnected' : `${s.remoteAddress}:${s.remotePort}`;
  return `socket ${local} -> ${remote}${s.destroyed ? ' (destroyed)' : ''}${s.connecting ? ' (connecting)' : ''}`;
}

/** Waits up to `graceMs` for every socket, timer and child process to close; fails naming what is left. */
export async function assertNoOpenHandles(graceMs = 5_000): Promise<void> {
  let left: string[] = [];
  for (const deadline = Date.now() + graceMs; ; ) {
    left = process.getActiveResourcesInfo().filter((r) => !IGNORED.has(r));
    if (left.length === 0) return;
    if (Date.now() >= deadline) break;
    await sleep(100);
  }
  const tcp = activeHandles().filter(isTcpSocket);
  const named = tcp.map(describeSocket);
  for (const s of tcp) s.destroy();
  for (const h of activeHandles()) if (h.constructor?.name === 'Timeout' || h.constructor?.name === 'ChildProcess') h.unref?.();
  throw new Error(`open handles at the end of the file: ${left.join(', ')}${named.length > 0 ? ` (${named.join('; ')})` : ''}`);
}
