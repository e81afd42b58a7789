import { ConfigError } from './errors.ts';

export interface RetryOptions {
  /** First retry delay in milliseconds. Default: 500. */
  readonly baseDelayMs?: number;
  /** Largest retry delay in milliseconds. Default: 300000 (5 minutes). */
  readonly maxDelayMs?: number;
  /** Attempts before an event is parked; the first publish counts as one. Default: 12. */
  readonly maxAttempts?: number;
}

export interface ResolvedRetryOptions {
  readonly baseDelayMs: number;
  readonly maxDelayMs: number;
  readonly maxAttempts: number;
}

export function resolveRetryOptions(options: RetryOptions = {}, field = 'retry'): ResolvedRetryOptions {
  const check = (name: keyof RetryOptions, fallback: number, min: number): number => {
    const v = options[name];
    if (v === undefined) return fallback;
    if (!Number.isSafeInteger(v) || v < min) throw new ConfigError(`${field}.${name}`, `must be an integer >= ${min}, got ${String(v)}`);
    return v;
  };
  const baseDelayMs = check('baseDelayMs', 500, 0);
  const maxDelayMs = check('maxDelayMs', 300_000, 0);
  const maxAttempts = check('maxAttempts', 12, 1);
  if (maxDelayMs < baseDelayMs) throw new ConfigError(`${field}.maxDelayMs`, `must be >= baseDelayMs (${baseDelayMs})`);
  return Object.freeze({ baseDelayMs, maxDelayMs, maxAttempts });
}

/**
 * Delay before retry number `attempt` (1 = after the first failure):
 * exponential, capped, with "equal jitter" (between half and all of the
 * exponential delay) so that retries of many events spread out but never
 * come back at once. A broker-requested delay (Retry-After) is honoured as a floor.
 */
export function retryDelay(options: ResolvedRetryOptions, attempt: number, requestedMs = 0, random: () => number = Math.random): number {
  const exp = Math.min(options.maxDelayMs, options.baseDelayMs * 2 ** Math.max(0, attempt - 1));
  const jittered = Math.round(exp / 2 + random() * (exp / 2));
  // A requested delay in fractions of a millisecond (a custom transport's retryAfterMs) is rounded up; NaN is ignored.
  const requested = Number.isFinite(requestedMs) ? Math.ceil(requestedMs) : 0;
  return Math.max(jittered, Math.min(requested, options.maxDelayMs * 4));
}
