/**
 * Loopback checks shared by everything that listens (the dashboard, the
 * health and metrics server): which addresses and Host names only this
 * machine reaches.
 */
import { isIP } from 'node:net';

/** True for 127.0.0.0/8, ::1, ::ffff:127.x.x.x and `localhost`: addresses only this machine reaches. */
export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  if (h === 'localhost') return true;
  if (isIP(h) === 4) return h.startsWith('127.');
  if (isIP(h) === 6) return h === '::1' || /^::ffff:127\./.test(h);
  return false;
}

/** The name part of a Host header (`[::1]:8080` → `[::1]`, `example.com:80` → `example.com`); '' when absent. */
export function hostName(host: string | undefined): string {
  if (host === undefined) return '';
  const m = /^(\[[^\]]*\]|[^:]*)(:\d+)?$/.exec(host);
  return m ? m[1]! : host;
}
