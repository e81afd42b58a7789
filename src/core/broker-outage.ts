/**
 * The one rule for a broker that does not answer when a transport or a
 * consumer starts (docs/operations.md, "Broker down at start"):
 *
 * - nothing answers at the address (refused, unknown host, unreachable,
 *   timed out, reset): an outage, which heals by waiting. A transport's
 *   `start()` logs one warning and resolves: the relay runs, and that
 *   transport's events wait as destination-down until the broker answers. A
 *   consumer's `start()` retries with capped backoff, a warning per attempt,
 *   until it connects or `stop()` is called.
 * - anything else (credentials refused, a TLS mismatch, a malformed address,
 *   an unsupported compression, a missing resource the operator must create):
 *   configuration, which waiting does not fix. `start()` throws the adapter's
 *   ConfigError naming the field and the fix, at once.
 *
 * Adapters classify with `brokerOutage` (network error codes anywhere in the
 * error's `cause` chain), adding what their client says differently.
 */
import type { Logger } from './logger.ts';
import { thrownText } from './error-text.ts';

/** Socket error codes that mean nothing (or nothing healthy) answers at the address right now. */
const OUTAGE_CODES = ['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'EHOSTDOWN', 'ETIMEDOUT', 'ECONNRESET'] as const;
const OUTAGE_TEXT = new RegExp(`\\b(${OUTAGE_CODES.join('|')})\\b`);

interface ErrorLike {
  readonly code?: unknown;
  readonly message?: unknown;
  readonly cause?: unknown;
  readonly errors?: unknown;
}

/**
 * The reason (`ECONNREFUSED: connect ECONNREFUSED 127.0.0.1:9092`) when `err`
 * or one of its causes is a network outage; null for anything else.
 *
 * @example
 * const reason = brokerOutage(err); // null: a configuration error, throw it
 */
export function brokerOutage(err: unknown): string | null {
  const seen = new Set<unknown>();
  const queue: unknown[] = [err];
  while (queue.length > 0 && seen.size < 16) {
    const e = queue.shift();
    if (e === null || typeof e !== 'object' || seen.has(e)) continue;
    seen.add(e);
    const { code, message, cause, errors } = e as ErrorLike;
    const text = typeof message === 'string' ? message.split('\n')[0]! : '';
    if (typeof code === 'string' && (OUTAGE_CODES as readonly string[]).includes(code)) return text.includes(code) ? text : `${code}: ${text}`;
    const found = OUTAGE_TEXT.exec(text);
    if (found) return text;
    queue.push(cause);
    if (Array.isArray(errors)) queue.push(...(errors as unknown[]));
  }
  return null;
}

/** What a transport tells `startDespiteOutage` about itself. */
export interface OutageContext {
  /** The transport's name, e.g. `kafka`. */
  readonly transport: string;
  /** Where it connects, without credentials (`127.0.0.1:9092`). */
  readonly address: string;
  readonly logger: Logger;
  /** The transport's own classifier; default `brokerOutage`. */
  readonly outage?: (err: unknown) => string | null;
}

/**
 * Runs a transport's connect-and-check step. Resolves true when it
 * succeeded; when the broker is unreachable (an outage, see above) logs one
 * warning naming the transport and that its events wait, and resolves false
 * (the transport connects on a later publish); rethrows anything else (a
 * ConfigError naming the field), and rethrows when `signal` aborted.
 *
 * @example
 * await startDespiteOutage({ transport: 'redis', address, logger }, () => this.#connect(signal), signal);
 */
export async function startDespiteOutage(context: OutageContext, connect: () => Promise<void>, signal?: AbortSignal): Promise<boolean> {
  try {
    await connect();
    return true;
  } catch (err) {
    if (signal?.aborted) throw err;
    const reason = (context.outage ?? brokerOutage)(err);
    if (reason === null) throw err;
    // The adapter's message names the setting to check, without credentials.
    warnOutageAtStart(context.logger, { transport: context.transport, address: context.address, reason, err: thrownText(err) });
    return false;
  }
}

/** The one warning of a transport that starts while its broker does not answer (the same words for every transport). */
export function warnOutageAtStart(logger: Logger, fields: { readonly transport: string; readonly address: string; readonly reason: string } & Record<string, unknown>): void {
  logger.warn(fields, `${fields.transport} transport: the broker does not answer at start; starting anyway, its events wait (destination down) until it answers`);
}
