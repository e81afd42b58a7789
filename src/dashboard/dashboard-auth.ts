/**
 * The dashboard's access checks, free of I/O so that unit tests cover them:
 * token comparison in constant time, sessions (each with its CSRF token),
 * the cookie, and the same-origin check of a POST.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { isLoopback } from '../core/loopback.ts';

export { isLoopback };

/**
 * Compares a presented secret with the expected one in time that does not
 * depend on where they differ: both are hashed first, so the lengths match too.
 */
export function sameSecret(presented: string, expected: string): boolean {
  const a = createHash('sha256').update(presented).digest();
  const b = createHash('sha256').update(expected).digest();
  return timingSafeEqual(a, b);
}

/** The name of the token `presented` matches, or null. Every token is compared, so the time does not say which one matched. */
export function matchToken(presented: string, tokens: ReadonlyMap<string, string>): string | null {
  let found: string | null = null;
  for (const [name, token] of tokens) if (sameSecret(presented, token) && found === null) found = name;
  return found;
}

/** `Authorization: Bearer <token>`, or null. */
export function bearerToken(header: string | undefined): string | null {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(header ?? '');
  return m ? m[1]! : null;
}

/** One cookie's value from a Cookie header, or null. */
export function readCookie(header: string | undefined, name: string): string | null {
  for (const part of (header ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return null;
}

export interface DashboardSession {
  readonly id: string;
  /** The token's name, or 'no-auth'. */
  readonly who: string;
  /** Sent back by the page in `X-CSRF-Token` with every POST (synchronizer token). */
  readonly csrf: string;
  expiresAt: number;
}

/**
 * Sessions in memory, bounded: the oldest goes when `max` is reached. A
 * restart of the dashboard logs everyone out, which is fine for an operator
 * tool and keeps session ids out of the database.
 */
export class SessionStore {
  readonly #sessions = new Map<string, DashboardSession>();
  constructor(
    readonly ttlMs: number,
    readonly max = 1000,
    private readonly now: () => number = Date.now,
  ) {}

  create(who: string): DashboardSession {
    if (this.#sessions.size >= this.max) this.#sessions.delete(this.#sessions.keys().next().value!);
    const session: DashboardSession = { id: randomBytes(32).toString('base64url'), who, csrf: randomBytes(32).toString('base64url'), expiresAt: this.now() + this.ttlMs };
    this.#sessions.set(session.id, session);
    return session;
  }

  /** The live session of this id (its lifetime extended), or null. */
  get(id: string | null): DashboardSession | null {
    if (id === null || !/^[A-Za-z0-9_-]{43}$/.test(id)) return null;
    const session = this.#sessions.get(id);
    if (!session) return null;
    if (session.expiresAt <= this.now()) {
      this.#sessions.delete(id);
      return null;
    }
    session.expiresAt = this.now() + this.ttlMs;
    return session;
  }

  delete(id: string): void {
    this.#sessions.delete(id);
  }

  get size(): number {
    return this.#sessions.size;
  }
}

/**
 * Why a state-changing request is refused as cross-site, or null when it
 * comes from the dashboard's own page: its Origin must name the host it was
 * sent to (or one of `allowedOrigins`); without an Origin header,
 * Sec-Fetch-Site must say same-origin. A request with neither is refused:
 * every browser this page runs in sends one of them.
 */
export function crossSiteReason(headers: { origin?: string | undefined; host?: string | undefined; 'sec-fetch-site'?: string | string[] | undefined }, allowedOrigins: readonly string[] = []): string | null {
  const site = headers['sec-fetch-site'];
  if (site !== undefined && site !== 'same-origin') return `Sec-Fetch-Site is ${String(site)}`;
  const origin = headers.origin;
  if (origin === undefined) return site === 'same-origin' ? null : 'no Origin or Sec-Fetch-Site header';
  if (allowedOrigins.includes(origin)) return null;
  let host: string;
  try {
    host = new URL(origin).host;
  } catch {
    return 'the Origin header is not a URL';
  }
  if (origin === 'null' || headers.host === undefined || host !== headers.host.toLowerCase()) return 'the Origin is another site';
  return null;
}

/** The Set-Cookie value of a session cookie: HttpOnly, SameSite=Strict, scoped to the dashboard's path. */
export function sessionCookie(name: string, value: string, path: string, secure: boolean, maxAgeSeconds: number): string {
  return `${name}=${value}; Path=${path}; HttpOnly; SameSite=Strict; Max-Age=${maxAgeSeconds}${secure ? '; Secure' : ''}`;
}

/**
 * Failed logins (form or Bearer) per client address in a sliding window:
 * after `max` failures the address gets 429 until the window passes, so a
 * guessable token cannot be guessed fast. Bounded: the oldest address goes
 * when `maxAddresses` is reached.
 */
export class FailureLimiter {
  readonly #failures = new Map<string, number[]>();
  constructor(
    readonly max = 10,
    readonly windowMs = 60_000,
    readonly maxAddresses = 10_000,
    private readonly now: () => number = Date.now,
  ) {}

  /** False while `address` has `max` failures in the window. */
  allowed(address: string): boolean {
    return this.#recent(address).length < this.max;
  }

  fail(address: string): void {
    const recent = this.#recent(address);
    recent.push(this.now());
    this.#failures.delete(address);
    if (this.#failures.size >= this.maxAddresses) this.#failures.delete(this.#failures.keys().next().value!);
    this.#failures.set(address, recent);
  }

  #recent(address: string): number[] {
    const since = this.now() - this.windowMs;
    return (this.#failures.get(address) ?? []).filter((t) => t > since);
  }
}
